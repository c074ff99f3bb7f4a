"""`cost`'s prediction against real runs: fresh smoke `reproduce`s (each its own results and an
empty call cache; the converted models, corpus and index linked from this machine's cache), then
`cost` beside them.

- Replaying the run's own call cache (`llm.replay`), the dry run follows the model's decisions: the
  dry run makes the calls the pipeline makes, step by step, and counts the shared ones once
  (calls made and unique per notebook within 10% of the run files').
- Without the replay, the synthetic model decides at the rates the run's own traces record
  (`price.work.decisions`): its unique calls within 25% of the run's in all and within a factor
  of 2 per notebook (a smoke notebook asks one to three questions of a set, so one question that
  reasons a step more or less moves it by a third or more; the per-notebook errors are printed).
- The pace recorded on that run (`cost --record-pace`; its steps' fixed seconds from it and the
  committed default run) and its decisions predict a second run at other sizes (more questions,
  another k), held to the same bounds; the seconds are printed beside the run's, not asserted (a
  wall-clock time depends on the machine's load).
Slow: a smoke run takes 6 minutes on a quiet 2-core machine, 20 on a busy one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from seakr_repro.core.paths import CACHE_DIR, REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(5400)]
OTHER_SIZES = ["datasets.n_questions=5", "notebooks.04-complex-qa.N_QUESTIONS=2", "uncertainty.k=6"]


def _reproduce(root, *sets) -> dict:
    cache = root / "cache"
    cache.mkdir(parents=True)
    for part in ("models", "gguf", "corpus", "indexes"):     # built inputs, not calls
        if (CACHE_DIR / part).is_dir():
            (cache / part).symlink_to((CACHE_DIR / part).resolve())
    env = {**os.environ, "SEAKR_RESULTS_DIR": str(root / "results"), "SEAKR_CACHE_DIR": str(cache),
           "SEAKR_TABLES_DIR": str(root / "tables"), "SEAKR_FIGURES_DIR": str(root / "figures")}
    args = [a for s in sets for a in ("--set", s)]
    got = subprocess.run([sys.executable, "-m", "seakr_repro", "reproduce", "--profile", "smoke", *args],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert got.returncode == 0, got.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _reproduce(tmp_path_factory.mktemp("smoke-run"))


def _cost(env, *extra) -> dict:
    got = subprocess.run([sys.executable, "-m", "seakr_repro", "cost", "--profile", "smoke", "--json", *extra],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout)


def _with_calls(got: dict) -> pd.DataFrame:
    beside = pd.DataFrame(got["beside_run"]).set_index("step")
    return beside[beside["calls actual"] > 0]


def test_the_smoke_prediction_is_the_smoke_runs_calls_per_notebook(run):
    got = _cost(run)
    assert got["replay"]["replayed"] > 0 and got["replay"]["synthetic"] == 0    # every call the run's
    with_calls = _with_calls(got)
    assert {"02-extract-hidden-states", "04-complex-qa", "06-ablations", "10-seed-methods",
            "11-mechanisms"} <= set(with_calls.index)
    for what in ("calls", "unique"):
        ratio = with_calls[f"{what} actual/predicted"]
        assert ratio.between(0.9, 1.1).all(), with_calls[[f"{what} predicted", f"{what} actual"]]


def test_the_calibrated_synthetic_count_is_within_a_quarter_of_the_run_per_notebook(run):
    got = _cost(run, "--no-replay")
    assert got["replay"]["replayed"] == 0 and got["decisions"]["smollm2-135m-instruct"]["retrieve_rate"] >= 0
    beside = _with_calls(got)
    print("\nthe synthetic model's guess at the run's rates, unique calls:\n"
          + beside[["unique predicted", "unique actual", "unique actual/predicted"]].round(2).to_string())
    _near(beside)


def _near(beside: pd.DataFrame) -> None:
    """Unique calls within 25% of the run's in all and a factor of 2 per notebook."""
    assert beside["unique predicted"].sum() == pytest.approx(beside["unique actual"].sum(), rel=0.25)
    assert beside["unique actual/predicted"].between(0.5, 2.0).all()


def test_the_pace_of_one_run_prices_a_run_of_other_sizes(run, tmp_path, monkeypatch):
    from seakr_repro.core.config import load_config, parse_override
    from seakr_repro.price import command, paces

    first = tmp_path / "first"
    first.symlink_to(run["SEAKR_RESULTS_DIR"])
    pace_file = tmp_path / "cpu_pace.csv"         # the committed default run's beside it: the fixed seconds
    committed = pd.read_csv(paces.CPU_PACE)
    committed[committed["profile"] == "default"].to_csv(pace_file, index=False)
    for module, name, value in ((paces, "CPU_PACE", pace_file), (paces, "DECISIONS", tmp_path / "decisions.csv"),
                                (paces, "RESULTS_ROOT", first),
                                (command, "RESULTS_ROOT", first), (command, "CACHE_DIR", tmp_path / "cache")):
        monkeypatch.setattr(module, name, value)       # the first run's pace and decisions
    machine = committed.loc[committed["profile"] == "default", "machine"].iloc[-1]
    paces.record_pace(load_config("smoke"), "the slow test's first run", machine, "test")
    other = _reproduce(tmp_path / "other", *OTHER_SIZES)
    overrides = dict(parse_override(s) for s in OTHER_SIZES)
    cfg = load_config("smoke", overrides)
    got = command.predict(cfg, overrides, replay=None)
    units, _ = command.priced(cfg, got)
    monkeypatch.setattr(command, "RESULTS_ROOT", Path(other["SEAKR_RESULTS_DIR"]))
    beside = command.beside_run(cfg, units).set_index("step")
    print("\nthe first run's pace and rates beside a run at other sizes:\n"
          + beside[["calls actual/predicted", "unique predicted", "unique actual", "seconds predicted",
                    "seconds actual", "seconds actual/predicted"]].round(2).to_string())
    _near(beside[beside["calls actual"] > 0])
