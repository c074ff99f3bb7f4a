"""How profile settings reach the methods, and that training never sees an evaluated question."""
import pytest

from seakr_repro.runs import inputs
from seakr_repro.runs import grid, plan
from seakr_repro.steps import seed_methods, tables
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.methods import method_class


def test_seakr_gets_the_profile_constants():
    cfg = load_config("paper")
    s = grid.method_settings(cfg, "seakr", {"eigen": -6.0})
    assert (s["k"], s["temperature"], s["top_k"], s["top_p"], s["sample_max_tokens"]) == (20, 1.0, 50, 0.9, 100)
    assert (s["hook"], s["alpha"], s["n_shot"], s["max_reasoning_steps"], s["max_docs"], s["top_n"]) == \
        ("mlp_out", 0.001, 10, 7, 5, 3)
    assert s["mode"] == "faithful" and s["delta"] == {"eigen": -6.0}
    assert set(s) <= set(method_class("seakr").DEFAULTS)


@pytest.mark.parametrize("method", ["cot", "ircot", "flare", "dragin"])
def test_baselines_get_only_settings_they_know(method):
    cfg = load_config("smoke")
    s = grid.method_settings(cfg, method, {})
    assert set(s) <= set(method_class(method).DEFAULTS)
    assert s["n_shot"] == 2 and s["max_new_tokens"] == 24


def test_paper_baselines_keep_dragins_published_values():
    s = grid.method_settings(load_config("paper"), "flare", {})
    assert "n_shot" not in s and "max_new_tokens" not in s   # None: the per-dataset table decides


def test_train_split_is_disjoint_from_the_evaluation_sample(tmp_path, monkeypatch):
    import seakr_repro.steps.prepare as prepare

    monkeypatch.setattr(prepare, "results_dir", lambda p: tmp_path / p)
    monkeypatch.setattr(inputs, "results_dir", lambda p: tmp_path / p)
    for step in (grid, tables, seed_methods):
        monkeypatch.setattr(step, "results_dir", lambda p: tmp_path / p)
    cfg = load_config("smoke")
    prepare.prepare_datasets(cfg, ["bundled-single"])
    evaluated = {r.id for r in prepare.load_prepared(cfg, "bundled-single")}
    train = seed_methods.training_questions(cfg, "bundled-single", 20)[0]
    assert len(train) == 20 and not evaluated & {r.id for r in train}
    assert [r.id for r in train] == [r.id for r in seed_methods.training_questions(cfg, "bundled-single", 20)[0]]


class _Loaded:
    """A backend that logs its load and close into `events`."""

    def __init__(self, name, events):
        self.name, self.events, self.n_layers, self.hidden_size, self.eos_token_id = name, events, 2, 4, 0
        events.append(("load", name))

    def close(self):
        self.events.append(("close", self.name))


def test_backend_pool_holds_one_model_at_a_time(tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    events = []
    cfg = load_config("paper")            # model.name: llama-2-7b-chat
    primary = CachedBackend(_Loaded("llama-2-7b-chat", events), root=tmp_path)
    pool = grid.BackendPool(
        cfg, primary, loader=lambda c, name: CachedBackend(_Loaded(name, events), root=tmp_path))
    assert pool.get() is primary and pool.get("llama-2-7b-chat") is primary
    selfrag = pool.get("selfrag-llama2-7b")
    assert selfrag.name == "selfrag-llama2-7b" and pool.get("selfrag-llama2-7b") is selfrag
    again = pool.get()                    # the profile's model is reloaded when asked again
    assert again is not primary and again.name == "llama-2-7b-chat"
    pool.close()
    assert events == [("load", "llama-2-7b-chat"), ("close", "llama-2-7b-chat"),
                      ("load", "selfrag-llama2-7b"), ("close", "selfrag-llama2-7b"),
                      ("load", "llama-2-7b-chat"), ("close", "llama-2-7b-chat")]
    assert pool.loads == 2


def test_backend_pool_says_which_model_it_holds_and_in_which_dtype():
    """`loaded` follows `get` and `close`: the profile's model in model.dtype, another model, a
    dtype other than the profile's, nothing after `close`; it cannot be set from outside."""
    events = []
    cfg = load_config("paper")            # llama-2-7b-chat in float16
    pool = grid.BackendPool(cfg, loader=lambda c, name, *dtype: _Loaded(name, events))
    assert pool.loaded is None
    pool.get()
    assert pool.loaded == ("llama-2-7b-chat", "float16")
    pool.get("selfrag-llama2-7b")
    assert pool.loaded == ("selfrag-llama2-7b", "float16")
    pool.get(None, "float32")
    assert pool.loaded == ("llama-2-7b-chat", "float32")
    pool.close()
    assert pool.loaded is None
    primary = grid.BackendPool(cfg, _Loaded("llama-2-7b-chat", events))
    assert primary.loaded == ("llama-2-7b-chat", "float16")    # a primary given counts as loaded
    with pytest.raises(AttributeError):
        primary.loaded = ("other", "float32")


def test_the_default_loader_reads_other_models_from_model_paths(monkeypatch, tmp_path):
    from seakr_repro.llm import registry
    seen = []
    monkeypatch.setattr(registry, "model_dir", lambda name, cfg: seen.append(name) or tmp_path)
    monkeypatch.setattr("seakr_repro.llm.hf.backend.HFBackend.from_dir",
                        classmethod(lambda cls, path, **kw: _Loaded(kw["name"], [])))
    cfg = load_config("smoke", {"cache.enabled": False})
    pool = grid.BackendPool(cfg)
    assert pool.get("gemma-3-270m").name == "gemma-3-270m" and seen == ["gemma-3-270m"]


def test_grid_runs_all_data_sets_of_a_model_before_the_next():
    from seakr_repro.artifacts import RunSpec
    from seakr_repro.runs.grid import model_order
    specs = [RunSpec("seakr", "seakr"), RunSpec("self_rag", "self_rag", model="selfrag-llama2-7b"),
             RunSpec("cot", "cot"), RunSpec("b", "seakr", model="llama-3-8b"),
             RunSpec("own", "cot", model="llama-2-7b-chat")]
    order = [s.label for s in model_order(specs, "llama-2-7b-chat")]
    assert order == ["seakr", "cot", "own", "self_rag", "b"]


def test_run_grid_loads_each_model_once_over_all_data_sets(monkeypatch, tmp_path):
    """Self-RAG's row between two rows of the profile's model, on two data sets: the profile's
    model is never reloaded and the other one is loaded once (no swapping per data set)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from fakes import FakeBackend, FakeSearcher

    import seakr_repro.runs.runner as runner
    from seakr_repro.data.records import QuestionRecord
    from seakr_repro.artifacts import RunSpec
    from seakr_repro.runs.grid import BackendPool, run_grid

    record = QuestionRecord(id="q1", question="Who?", answers=["Ann"])
    monkeypatch.setattr(inputs, "load_prepared", lambda cfg, dataset: [record])
    monkeypatch.setattr(grid, "deltas_for", lambda cfg: {"eigen": -6.0})
    monkeypatch.setattr(grid, "results_dir", lambda profile: tmp_path)
    monkeypatch.setattr(runner, "run_path", lambda p, d, label, c: tmp_path / d / f"{label}.jsonl")
    ran = []

    def run_method(method, records, path, **kw):
        ran.append((method.backend.name, path.parent.name))
        return [{"id": "q1", "answer": "Ann", "golds": ["Ann"], "em": 1, "f1": 1, "n_retrievals": 0,
                 "llm_calls": 1, "tokens": 1, "seconds": 0.0}]
    monkeypatch.setattr(runner, "run_method", run_method)
    events = []

    def loader(cfg, name):
        events.append(("load", name))
        b = FakeBackend(lambda p, s: "So the answer is Ann.", name=name)
        b.close = lambda: events.append(("close", name))
        return b
    cfg = load_config("smoke")
    own = cfg["model.name"]
    pool = BackendPool(cfg, loader=loader)
    specs = [RunSpec("cot", "cot"), RunSpec("other", "cot", model="other-model"), RunSpec("ircot", "ircot")]
    res, skipped = run_grid(cfg, pool, FakeSearcher([]), specs, ["bundled-2wiki", "bundled-hotpotqa"],
                            progress=False)
    assert not skipped and len(res) == 3 * 2 * 2
    assert events == [("load", own), ("close", own), ("load", "other-model")]
    assert [m for m, _ in ran] == [own] * 4 + ["other-model"] * 2
@pytest.mark.parametrize("derive_rows", [True, False])
def test_run_grid_derives_rows_only_where_the_profile_says(monkeypatch, tmp_path, derive_rows):
    """runner.derive_rows: true writes what another run's file answers before running the rest
    (runs/derived.py); false runs every row (a run that must compute every call)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from fakes import FakeBackend, FakeSearcher

    import seakr_repro.runs.derived as derived
    import seakr_repro.runs.runner as runner
    from seakr_repro.artifacts import RunSpec
    from seakr_repro.data.records import QuestionRecord
    from seakr_repro.runs.grid import BackendPool, run_grid

    monkeypatch.setattr(inputs, "load_prepared", lambda cfg, dataset: [QuestionRecord("q1", "Who?", ["Ann"])])
    monkeypatch.setattr(grid, "results_dir", lambda profile: tmp_path)
    monkeypatch.setattr(runner, "run_path", lambda p, d, label, c: tmp_path / d / f"{label}.jsonl")
    monkeypatch.setattr(runner, "run_method", lambda method, records, path, **kw: [
        {"id": "q1", "answer": "Ann", "golds": ["Ann"], "em": 1, "f1": 1, "n_retrievals": 0, "llm_calls": 1,
         "tokens": 1, "seconds": 0.0}])
    asked = []
    monkeypatch.setattr(derived, "derive", lambda method, path, records: asked.append(path.name) or 0)
    cfg = load_config("smoke", {"runner.derive_rows": derive_rows})
    pool = BackendPool(cfg, loader=lambda cfg, name: FakeBackend(lambda p, s: "So the answer is Ann.", name=name))
    run_grid(cfg, pool, FakeSearcher([]), [RunSpec("cot", "cot"), RunSpec("cot-again", "cot")],
             ["bundled-2wiki"], progress=False)
    assert asked == (["cot.jsonl", "cot-again.jsonl"] if derive_rows else [])


@pytest.fixture
def results_in(tmp_path, monkeypatch):
    import seakr_repro.steps.prepare as prepare

    monkeypatch.setattr(prepare, "results_dir", lambda p: tmp_path / p)
    monkeypatch.setattr(inputs, "results_dir", lambda p: tmp_path / p)
    for step in (grid, tables, seed_methods):
        monkeypatch.setattr(step, "results_dir", lambda p: tmp_path / p)
    return tmp_path


def test_an_official_training_split_is_used_when_on_disk(results_in, monkeypatch):
    """bundled-single stands in for a training file: the records come from it, not from the
    evaluation file's remainder."""
    import seakr_repro.data.registry as registry
    import seakr_repro.steps.prepare as prepare

    monkeypatch.setitem(registry.TRAIN_SPLITS, "bundled-hotpotqa", "bundled-single")
    cfg = load_config("smoke")
    prepare.prepare_datasets(cfg, ["bundled-hotpotqa"])
    train, source = seed_methods.training_questions(cfg, "bundled-hotpotqa", 5)
    assert len(train) == 5 and {r.source for r in train} == {"bundled-single"}
    assert "official training split" in source


def test_no_training_questions_when_evaluation_uses_every_question(results_in, monkeypatch):
    import seakr_repro.data.registry as registry
    import seakr_repro.steps.prepare as prepare

    cfg = load_config("smoke", {"datasets.n_questions": None})
    prepare.prepare_datasets(cfg, ["bundled-single"])
    with pytest.raises(DataMissingError, match="uses all .* questions"):
        seed_methods.training_questions(cfg, "bundled-single", 4)
    monkeypatch.setattr(registry.paths, "RAW_DIR", results_in / "no-raw")    # nq-train is absent
    monkeypatch.setitem(registry.TRAIN_SPLITS, "bundled-single", "nq-train")
    with pytest.raises(DataMissingError, match="nq-train.qa.csv"):   # says where to put it
        seed_methods.training_questions(cfg, "bundled-single", 4)


def test_notebook_10_skips_the_trained_rows_with_the_reason_and_goes_on(results_in, monkeypatch):
    """The whole evaluation set and no training file: SKR's learned variants and TAIKC-KBAE are
    skipped with the reason; SeaKR, SKR-prompt and TAIKC still run; no exception."""
    import pandas as pd

    import seakr_repro.methods.taikc.kbae as kbae
    import seakr_repro.steps.prepare as prepare

    cfg = load_config("smoke", {"datasets.n_questions": None})
    names = ["bundled-hotpotqa", "bundled-single"]
    prepare.prepare_datasets(cfg, names)
    ran = []

    def fake_grid(cfg, pool, searcher, specs, datasets, n, table="", progress=True):
        ran.extend((s.label, d) for s in specs for d in datasets)
        return pd.DataFrame([{"method": s.label, "dataset": d} for s in specs for d in datasets]), {}

    class Pool:
        def get(self, name=None):
            return object()

    monkeypatch.setattr(seed_methods, "run_grid", fake_grid)
    monkeypatch.setattr(kbae, "kbae_unavailable", lambda backend: None)
    monkeypatch.setattr(kbae, "bootstrap_adapter", lambda *a, **k: pytest.fail("KBAE trained without data"))
    results, skipped, notes = seed_methods.run_seed_methods(cfg, Pool(), None, names, 1, 4, 4, {},
                                                           progress=False)
    assert {label for label, _ in ran} == {"seakr", "skr-prompt", "taikc"}
    assert set(skipped) == {"skr-icl", "skr-cls", "skr-knn", "taikc-kbae"}
    assert all("no training questions" in why for why in skipped.values())
    assert "bundled-hotpotqa" in skipped["skr-icl"] and "bundled-single" in skipped["skr-icl"]
    assert list(notes["dataset"]) == names and notes["train_source"].isna().all()


def test_select_questions_is_a_seeded_sample_and_never_silently_smaller(results_in):
    import seakr_repro.steps.prepare as prepare

    cfg = load_config("smoke")                 # prepares 3 questions
    prepare.prepare_datasets(cfg, ["bundled-single"])
    prepared = [r.id for r in prepare.load_prepared(cfg, "bundled-single")]
    assert [r.id for r in grid.select_questions(cfg, "bundled-single", None)] == prepared
    two = [r.id for r in grid.select_questions(cfg, "bundled-single", 2)]
    assert set(two) <= set(prepared) and two == [r.id for r in grid.select_questions(
        cfg, "bundled-single", 2)]
    with pytest.raises(UserError, match="prepared 3") as err:
        grid.select_questions(cfg, "bundled-single", 6)
    assert "datasets.n_questions=6" in err.value.paragraph()


def test_analysis_data_sets_are_a_setting():
    assert plan.analysis_datasets(load_config("paper")) == ["2wiki", "hotpotqa", "nq"]
    smoke = load_config("smoke")
    assert plan.analysis_datasets(smoke) == ["bundled-2wiki", "bundled-single"]
    assert plan.analysis_datasets(load_config("default")) == ["bundled-2wiki", "bundled-hotpotqa",
                                                                      "bundled-single"]
    with pytest.raises(UserError, match="does not prepare"):
        plan.analysis_datasets(load_config("smoke", {"analysis.datasets": ["nq"]}))


def test_methods_declare_the_config_keys_they_read_and_base_yaml_states_their_defaults():
    """Each method's CONFIG names keys of params/base.yaml; where base.yaml gives a value it is the
    method's own default (one set of defaults), except where a null default means "look it up"."""
    import yaml

    from seakr_repro.artifacts import METHODS
    from seakr_repro.core.paths import REPO_ROOT

    raw = yaml.safe_load((REPO_ROOT / "params" / "base.yaml").read_text())
    lookup_when_null = {("seakr", "official_repo")}   # None: prompts.official_repo's path
    for name in METHODS:
        cls = method_class(name)
        for setting, key in cls.CONFIG.items():
            node = raw
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{name}.{setting}: {key} not in base.yaml"
                node = node[part]
            if setting in cls.DEFAULTS and node is not None and (name, setting) not in lookup_when_null:
                assert node == cls.DEFAULTS[setting], (name, setting, key)
    assert set(method_class("seakr").CONFIG) <= set(method_class("seakr").DEFAULTS)
