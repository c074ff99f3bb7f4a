"""`make bench`'s dtype comparison (`python -m seakr_repro bench dtypes`): SeaKR per question in
each model.dtype, alternating question by question on the same questions, with each dtype's ratio
to the first and answer agreement. SeaKR itself is replaced by a fake run here (the real one is
what `make bench` measures)."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from seakr_repro.runs import inputs
from seakr_repro.benchmarks import dtypes, seakr_questions


@pytest.fixture
def fake_seakr(monkeypatch, tmp_path):
    """Questions q0..q3; each backend answers from its `answers` and takes its `seconds`."""
    from seakr_repro.core import paths
    from seakr_repro.runs import grid
    from seakr_repro.steps import prepare

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path / "results")
    monkeypatch.setattr(prepare, "prepare_datasets", lambda cfg, names: None)
    monkeypatch.setattr(prepare, "ensure_index", lambda cfg: None)
    monkeypatch.setattr(inputs, "open_profile_searcher", lambda cfg: None)
    monkeypatch.setattr(inputs, "load_prepared",
                        lambda cfg, d: [SimpleNamespace(id=f"q{i}") for i in range(4)])
    monkeypatch.setattr(grid, "deltas_for", lambda cfg: {"eigen": -6.0})
    calls = []

    def run(cfg, backend, searcher, dataset, records, deltas, concurrency, out_dir, label):
        calls.append(label)
        (rec,) = records
        i = int(rec.id[1:])
        with open(Path(out_dir) / f"{label}.jsonl", "w") as fh:
            fh.write(json.dumps({"id": rec.id, "answer": backend.answers[i]}) + "\n")
        return {"seconds_per_question": backend.seconds, "llm_calls_per_question": backend.calls,
                "generated_tokens_per_question": 100.0, "em": 0.0}

    monkeypatch.setattr(seakr_questions, "run_seakr", run)
    return calls


def _backend(answers, seconds, calls=10.0):
    return SimpleNamespace(answers=answers, seconds=seconds, calls=calls,
                           generate=lambda prompt, max_new_tokens: None)


def test_seakr_alternates_the_backends_and_counts_agreeing_answers(fake_seakr):
    from seakr_repro.core.config import load_config

    cfg = load_config("smoke")
    got = seakr_questions.seakr_alternating(cfg, {"a": _backend(["x", "y", "z", "w"], 2.0),
                                         "b": _backend(["x", "y", "other", "w"], 1.0)}, "d", 3)
    assert fake_seakr == ["a-0", "b-0", "b-1", "a-1", "a-2", "b-2"]      # order swapped each question
    assert got["questions"] == ["q0", "q1", "q2"] and got["answers_agree"] == 2
    assert got["a"]["answers"] == ["x", "y", "z"] and got["b"]["seconds_per_question"] == 1.0


def test_dtypes_report_each_ratio_to_the_first(fake_seakr, monkeypatch, tmp_path, capsys):
    import seakr_repro.llm as llm

    loaded = {"float32": _backend(["x"] * 4, 2.0), "bfloat16": _backend(["x", "x", "y", "x"], 1.5, 12.0)}
    monkeypatch.setattr(llm, "load_backend", lambda cfg, cache: loaded[cfg["model.dtype"]])
    report = dtypes.main(["--dtypes", "float32,bfloat16", "--profile", "smoke", "--seakr-questions", "4"])
    sq = report["seakr_per_question"]
    assert sq["bfloat16"]["ratio_to_float32"] == {"seconds_per_question": 0.75,
                                                   "llm_calls_per_question": 1.2,
                                                   "generated_tokens_per_question": 1.0}
    assert sq["answers_agree"] == 3 and report["compute"]["bfloat16"]["dtype"] == "bfloat16"
    saved = tmp_path / "results" / "smoke" / "bench" / "dtypes.json"
    assert json.loads(saved.read_text())["dtypes"] == ["float32", "bfloat16"]
    assert "same answer in every dtype on 3 of 4 questions" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="two or more different"):
        dtypes.main(["--dtypes", "float32", "--profile", "smoke"])
