"""`cost`'s prediction against a real run: a fresh smoke `reproduce` (its own results and an empty
call cache; the converted models, corpus and index linked from this machine's cache), then `cost
--profile smoke --json` beside it. Its dry run replays that run's call cache (`llm.replay`), so the
model's decisions are the run's: what is checked is that the dry run makes the calls the pipeline
makes, step by step, and counts the shared ones once (calls made and unique per notebook within
10% of the run files' llm_calls and llm_cache_hits). The synthetic model's own guess, without the
replay, is printed beside it (how far it is, not a bound). Slow: a smoke run takes 6 minutes on a
quiet 2-core machine, 20 on a busy one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from seakr_repro.core.paths import CACHE_DIR, REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("smoke-run")
    cache = root / "cache"
    cache.mkdir()
    for part in ("models", "gguf", "corpus", "indexes"):     # built inputs, not calls
        if (CACHE_DIR / part).is_dir():
            (cache / part).symlink_to((CACHE_DIR / part).resolve())
    env = {**os.environ, "SEAKR_RESULTS_DIR": str(root / "results"), "SEAKR_CACHE_DIR": str(cache),
           "SEAKR_TABLES_DIR": str(root / "tables"), "SEAKR_FIGURES_DIR": str(root / "figures")}
    got = subprocess.run([sys.executable, "-m", "seakr_repro", "reproduce", "--profile", "smoke"], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=3600)
    assert got.returncode == 0, got.stderr[-3000:]
    return env


def _cost(env, *extra) -> dict:
    got = subprocess.run([sys.executable, "-m", "seakr_repro", "cost", "--profile", "smoke", "--json", *extra],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout)


def test_the_smoke_prediction_is_the_smoke_runs_calls_per_notebook(run):
    got = _cost(run)
    assert got["replay"]["replayed"] > 0 and got["replay"]["synthetic"] == 0    # every call the run's
    beside = pd.DataFrame(got["beside_run"]).set_index("step")
    with_calls = beside[beside["calls actual"] > 0]
    assert {"02-extract-hidden-states", "04-complex-qa", "06-ablations", "10-seed-methods",
            "11-mechanisms"} <= set(with_calls.index)
    for what in ("calls", "unique"):
        ratio = with_calls[f"{what} actual/predicted"]
        assert ratio.between(0.9, 1.1).all(), with_calls[[f"{what} predicted", f"{what} actual"]]
    guess = pd.DataFrame(_cost(run, "--no-replay")["beside_run"]).set_index("step")
    print("\nthe synthetic model's guess, actual/predicted per notebook:\n" +
          guess[["calls actual/predicted", "unique actual/predicted"]].round(2).to_string())
