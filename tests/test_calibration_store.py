"""Step 02's per-question float16 vector files: written atomically, resumed after a crash in the
middle of a question, read back one (hook, layer) at a time."""
from types import SimpleNamespace

import numpy as np
import pytest

from seakr_repro.steps import extraction, estimators
from seakr_repro.core import paths
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.uncertainty import eigen_score

L, K, D = 4, 3, 8


def _arrays(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {h: rng.normal(size=(L, K, D)).astype(np.float32) for h in extraction.HOOKS}


def _row(rec) -> dict:
    return {"id": rec.id, "correct": True, "nonempty": [True, False, True]}


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)
    return load_config("smoke")


def test_crash_mid_question_resumes_and_reads_one_layer(cfg, monkeypatch):
    records = [SimpleNamespace(id=f"q/{i}") for i in range(5)]
    backend = SimpleNamespace(n_layers=L, hidden_size=D)
    done = []

    def extract(backend, record, cfg, n_shot, crash_at=None):
        i = int(record.id.split("/")[1])
        if i == crash_at:
            raise KeyboardInterrupt("killed mid-question")
        done.append(record.id)
        return _row(record), {h: v.astype(np.float16) for h, v in _arrays(i).items()}

    monkeypatch.setattr(extraction, "extract_question", lambda *a: extract(*a, crash_at=3))
    with pytest.raises(KeyboardInterrupt):
        extraction.run_extraction(backend, records, cfg, 0, progress=False)
    out = extraction.extraction_dir(cfg)
    assert sorted(p.name for p in (out / "vectors").iterdir()) == ["q_0.npy", "q_1.npy", "q_2.npy"]
    # a crash while writing the JSON line of question 2 tears it; its vectors alone do not count
    text = (out / "questions.jsonl").read_text()
    (out / "questions.jsonl").write_text(text[: text.rindex('{"id": "q/2"') + 9])

    done.clear()
    monkeypatch.setattr(extraction, "extract_question", lambda *a: extract(*a))
    extraction.run_extraction(backend, records, cfg, 0, progress=False)
    assert done == ["q/2", "q/3", "q/4"]              # the torn and the unfinished ones, once each
    rows, store = extraction.load_extraction(cfg)
    assert [r["id"] for r in rows] == [f"q/{i}" for i in range(5)]
    assert (store.n_layers, store.k, store.hidden, len(store)) == (L, K, D, 5)

    got = store.layer("residual", 2)
    assert got.shape == (5, K, D) and got.dtype == np.float32
    for q in range(5):
        want = _arrays(q)["residual"][2].astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(got[q], want)
    nonempty = store.nonempty("mlp_out", 1)
    assert [v.shape for v in nonempty] == [(2, D)] * 5
    view = store.by_layer("mlp_out")
    assert list(view) == list(range(L)) and len(view[3]) == 5
    with pytest.raises(KeyError):
        view[L]
    with pytest.raises(UserError, match="layer 9"):
        store.layer("mlp_out", 9)
    stats = [{**r, "greedy_stats": {"logprobs": [-1.0], "official_logprobs": None, "logsumexp": [3.0]},
              "sample_stats": [{"nonempty": ok, "logprobs": [-1.0], "official_logprobs": None}
                               for ok in r["nonempty"]], "prompt_uncertainty": 0.5} for r in rows]
    scores = estimators.estimator_scores(stats, store.layer("mlp_out", 1),
                                          {"alpha": 1e-3, "variant": "seakr"}, names=["eigen"])
    expected = [eigen_score(v, 1e-3) for v in nonempty]
    np.testing.assert_allclose(scores["eigen"], expected)


def test_old_npz_layout_asks_to_rerun_step_02(cfg):
    out = extraction.extraction_dir(cfg)
    (out / "vectors").mkdir(parents=True)
    (out / "questions.jsonl").write_text('{"id": "a", "nonempty": [true]}\n')
    np.savez_compressed(out / "vectors" / "a.npz", **_arrays(0))
    with pytest.raises(UserError, match="old compressed .npz") as err:
        extraction.load_extraction(cfg)
    assert "re-run notebook 02" in err.value.paragraph()
