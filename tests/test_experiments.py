"""How profile settings reach the methods, and that training never sees an evaluated question."""
import pytest

from seakr_repro import experiments
from seakr_repro.config import load_config
from seakr_repro.methods import METHODS


def test_seakr_gets_the_profile_constants():
    cfg = load_config("paper")
    s = experiments.method_settings(cfg, "seakr", {"eigen": -6.0})
    assert (s["k"], s["temperature"], s["top_k"], s["top_p"], s["sample_max_tokens"]) == (20, 1.0, 50, 0.9, 100)
    assert (s["hook"], s["alpha"], s["n_shot"], s["max_reasoning_steps"], s["max_docs"], s["top_n"]) == \
        ("mlp_out", 0.001, 10, 7, 5, 3)
    assert s["mode"] == "faithful" and s["delta"] == {"eigen": -6.0}
    assert set(s) <= set(METHODS["seakr"].DEFAULTS)


@pytest.mark.parametrize("method", ["cot", "ircot", "flare", "dragin"])
def test_baselines_get_only_settings_they_know(method):
    cfg = load_config("smoke")
    s = experiments.method_settings(cfg, method, {})
    assert set(s) <= set(METHODS[method].DEFAULTS)
    assert s["n_shot"] == 2 and s["max_new_tokens"] == 24


def test_paper_baselines_keep_dragins_published_values():
    s = experiments.method_settings(load_config("paper"), "flare", {})
    assert "n_shot" not in s and "max_new_tokens" not in s   # None: the per-dataset table decides


def test_train_split_is_disjoint_from_the_evaluation_sample(tmp_path, monkeypatch):
    import seakr_repro.prepare as prepare

    monkeypatch.setattr(prepare, "results_dir", lambda p: tmp_path / p)
    monkeypatch.setattr(experiments, "results_dir", lambda p: tmp_path / p)
    cfg = load_config("smoke")
    prepare.prepare_datasets(cfg, ["bundled-single"])
    evaluated = {r.id for r in prepare.load_prepared(cfg, "bundled-single")}
    train = experiments.train_split(cfg, "bundled-single", 20)
    assert len(train) == 20 and not evaluated & {r.id for r in train}
    assert [r.id for r in train] == [r.id for r in experiments.train_split(cfg, "bundled-single", 20)]
