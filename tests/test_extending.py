"""docs/extending.md followed as written: its code blocks that open with a file name become a
package of their own (on sys.path), whose import registers a toy method and a toy estimator through
the public registries; the method then runs through Table 1 and the disk estimate, the estimator
through step 03's per-question scores and the claims ledger of the smoke profile."""
import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from seakr_repro import artifacts
from seakr_repro.core.config import load_config
from seakr_repro.uncertainty.registry import ESTIMATORS

sys.path.insert(0, str(Path(__file__).parent))

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def guide_files() -> dict[str, str]:
    """{file: code} of the guide's Python blocks whose first line is `# <file>.py`."""
    return dict(re.findall(r"```python\n# (\S+\.py)\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S))


@pytest.fixture
def toyext(tmp_path, monkeypatch):
    """The guide's package, imported; the registries as they were afterwards."""
    methods, estimators = dict(artifacts.METHODS), dict(ESTIMATORS)
    for rel, code in guide_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("toyext")
    for registry, saved in ((artifacts.METHODS, methods), (ESTIMATORS, estimators)):
        registry.clear()
        registry.update(saved)
    for name in [m for m in sys.modules if m.split(".")[0] == "toyext"]:
        del sys.modules[name]


def test_the_guide_writes_the_toy_package():
    assert set(guide_files()) == {"toyext/__init__.py", "toyext/method.py", "toyext/estimator.py"}


def test_the_guides_method_is_a_table1_row_and_is_sized(toyext, tmp_path, monkeypatch):
    from fakes import FakeBackend, FakeSearcher, hit

    import seakr_repro.core.paths as paths
    from seakr_repro.data.records import QuestionRecord
    from seakr_repro.runs import disk_needs, grid, inputs
    from seakr_repro.runs.plan import question_runs
    from seakr_repro.steps import tables

    assert artifacts.methods("table1")[-1] == "top-passage"
    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path / "results")
    record = QuestionRecord(id="q1", question="Who wrote Hamlet?", answers=["Shakespeare"])
    monkeypatch.setattr(inputs, "load_prepared", lambda cfg, dataset: [record])
    monkeypatch.setattr(tables, "deltas_for", lambda cfg: {n: -6.0 for n in ESTIMATORS})
    cfg = load_config("smoke")
    pool = grid.BackendPool(cfg, loader=lambda cfg, name: FakeBackend(
        lambda prompt, s: "Shakespeare" if "Hamlet is by Shakespeare" in prompt else "nobody", name=name))
    run = tables.run_table("table1", cfg, 1, methods=["top-passage"], pool=pool,
                           searcher=FakeSearcher([hit("d1", "Hamlet is by Shakespeare.")]), progress=False)
    f1 = run.results[run.results["metric"] == "f1"]
    assert set(f1["method"]) == {"top-passage"} and set(f1["dataset"]) == set(cfg["datasets.complex"])
    assert (f1["value"] == 100).all() and not run.skipped
    # the disk estimate sizes its runs by its own figures
    runs = question_runs(cfg, prepared=True)
    n = int(runs.loc[runs["method"] == "top-passage", "questions"].sum())
    with_toy = disk_needs.estimate_needs(cfg)
    spec = artifacts.METHODS.pop("top-passage")     # not monkeypatch: its undo would come after toyext's
    without = disk_needs.estimate_needs(cfg)
    artifacts.METHODS["top-passage"] = spec
    assert n > 0 and with_toy["run_files"] - without["run_files"] == 900 * n
    assert with_toy["call_cache"] - without["call_cache"] == 1_200 * n


def _extraction_row(i: int, rng, correct: bool, k: int) -> dict:
    """One step-02 question's row: the greedy step's and k samples' statistics."""
    spread = 0.3 if correct else 2.0          # a wrong answer's tokens are less likely
    lps = list(-rng.exponential(spread, size=6))
    samples = [{"nonempty": True, "logprobs": list(-rng.exponential(spread, size=5)), "official_logprobs": None}
               for _ in range(k)]
    return {"id": f"q{i}", "correct": correct, "nonempty": [True] * k, "prompt_uncertainty": 0.5,
            "greedy_stats": {"logprobs": lps, "official_logprobs": lps[:-1], "logsumexp": [1.0] * 6},
            "sample_stats": samples}


def test_the_guides_estimator_reaches_step_03_and_the_ledger(toyext, tmp_path, monkeypatch):
    import seakr_repro.core.paths as paths
    from seakr_repro.steps import claims, estimators

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path / "results")
    cfg = load_config("smoke")
    rng = np.random.default_rng(0)
    k, layers, hidden = 4, 3, 8
    scores = pd.DataFrame([estimators.score_columns(_extraction_row(i, rng, i % 2 == 0, k),
                                                    rng.normal(size=(layers, k, hidden)), cfg, ks=[2, 4])
                           for i in range(40)])
    assert scores["est:mean_surprise"].notna().all()
    folder = paths.results_dir(cfg.profile) / artifacts.CALIBRATION
    folder.mkdir(parents=True)
    scores.to_csv(folder / "question_scores.csv", index=False)
    ledger = claims.render_ledger(cfg, out_dir=tmp_path / "tables", n_boot=50)
    row = ledger[ledger["measurement"].str.startswith("AUROC(eigen) - AUROC(mean_surprise)")]
    assert len(row) == 1 and row["n"].iloc[0] == 40
    # the toy tells wrong answers apart (its AUROC near 1), eigen on random vectors does not
    assert row["diff"].iloc[0] < -0.2
