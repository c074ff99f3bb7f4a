"""`python -m seakr_repro compare-runs` (commands/compare_runs.py): two runs of a profile (float32
and bfloat16, say) compared row by row of the claims ledger and estimator by estimator, on small
synthetic results."""
import json

import numpy as np
import pandas as pd
import pytest

from seakr_repro.core.config import load_config
from seakr_repro.steps import claims as C
from seakr_repro import cli
from seakr_repro.commands import compare_runs
from seakr_repro.core.errors import UserError


def _run(res, seakr_f1, n=30, eigen_noise=0.0, seed=0):
    """A results folder: notebook 04's SeaKR and DRAGIN runs, notebook 03's question scores."""
    res.mkdir(parents=True)
    rows = {"seakr": seakr_f1, "dragin": [0.0] * n}
    table = []
    for method, f1s in rows.items():
        path = res / "runs" / "d" / f"{method}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"id": f"q{i}", "golds": ["x"], "answer": "x", "em": f, "f1": f,
                                            "n_retrievals": 1, "seconds": 1.0, "extra": {}}) + "\n"
                                for i, f in enumerate(f1s)))
        table.append({"method": method, "dataset": "d", "metric": "f1", "run_file": f"runs/d/{method}.jsonl"})
    (res / "04-complex-qa").mkdir()
    pd.DataFrame(table).to_csv(res / "04-complex-qa" / "results.csv", index=False)
    rng = np.random.default_rng(seed)
    wrong = np.array([0, 1] * (n // 2))
    (res / "03-uncertainty-estimators").mkdir()
    pd.DataFrame({"id": [f"c{i}" for i in range(n)], "incorrect": wrong,
                  "eigen": wrong + rng.normal(0, 0.1 + eigen_noise, n),
                  "est:perplexity": rng.normal(size=n)}
                 ).to_csv(res / "03-uncertainty-estimators" / "question_scores.csv", index=False)


def test_ledger_rows_and_aurocs_are_paired_across_two_runs(tmp_path, capsys):
    a, b = tmp_path / "f32" / "default", tmp_path / "bf16" / "default"
    _run(a, [1.0] * 30)                                   # SeaKR beats DRAGIN: holds
    _run(b, [1.0] + [0.0] * 29, eigen_noise=5.0)          # barely: inconclusive; eigen degraded
    ledger, aurocs = compare_runs.compare(load_config("default"), a, b, ("float32", "bfloat16"), n_boot=200,
                                          out=tmp_path / "cmp")
    six = ledger[ledger["claim"] == 6].iloc[0]
    assert six["float32 verdict"] == C.HOLDS and six["bfloat16 verdict"] != C.HOLDS
    assert six["verdict flipped"] and six["bfloat16 - float32"] == pytest.approx(100 / 30 - 100)
    assert six["bfloat16 outside float32's interval"]
    assert set(ledger["claim"]) == {1, 5, 6}              # every row either run measured
    eigen = aurocs[aurocs["estimator"] == "eigen"].iloc[0]
    assert eigen["float32 AUROC"] == pytest.approx(1.0) and eigen["bfloat16 AUROC"] < 0.8
    assert eigen["high"] < 0 and eigen["bfloat16 outside float32's interval"]
    out = capsys.readouterr().out
    assert "1 outside float32's interval" in out                   # eigen moved, perplexity did not
    flips = int(ledger["verdict flipped"].sum())
    assert flips >= 2 and f"{flips} verdict(s) flipped" in out      # claim 1 (eigen) and claim 6
    assert (tmp_path / "cmp" / "ledger.csv").is_file() and (tmp_path / "cmp" / "auroc.csv").is_file()


def test_the_same_run_twice_moves_nothing(tmp_path):
    a = tmp_path / "a" / "default"
    _run(a, [1.0] * 30)
    cfg = load_config("default")
    ledger = compare_runs.compare_ledgers(cfg, a, a, ("x", "y"), n_boot=100)
    assert not ledger["verdict flipped"].any() and (ledger["y - x"] == 0).all()
    aurocs = compare_runs.compare_aurocs(a, a, ("x", "y"), n_boot=100)
    assert (aurocs["y - x"] == 0).all() and not aurocs["y outside x's interval"].any()


def test_the_subcommand_writes_the_comparison(tmp_path, capsys):
    a = tmp_path / "a" / "default"
    _run(a, [1.0] * 30)
    assert cli.main(["compare-runs", str(a), str(a), "--labels", "x,y", "--n-boot", "50",
                     "--out", str(tmp_path / "cmp")]) == 0
    assert "# x (" in capsys.readouterr().out
    assert (tmp_path / "cmp" / "comparison.md").read_text().startswith("# x (")


def test_a_folder_without_results_is_named(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare-runs", str(tmp_path / "empty"), str(tmp_path / "empty")])
    assert exit_.value.code == 2 and "holds none of the results" in capsys.readouterr().err


def test_the_labels_must_be_two_different_names():
    assert compare_runs.parse_labels("float32, bfloat16") == ("float32", "bfloat16")
    for bad in ("a", "a,a", "a,b,c"):
        with pytest.raises(UserError, match="--labels needs two different names"):
            compare_runs.parse_labels(bad)


def test_score_files_are_ledger_inputs():
    assert set(compare_runs.SCORE_FILES) <= set(C.INPUTS)
