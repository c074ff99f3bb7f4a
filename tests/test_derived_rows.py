"""Rows derived from another run's file (`runs.derived`) equal the rows running them writes, in
everything but the work (calls served without the model, no seconds)."""
from __future__ import annotations

import json
import math

import pytest

from fakes import FakeSearcher
from seakr_repro.data.registry import load_dataset
from seakr_repro.llm.cache import CachedBackend
from seakr_repro.llm.synthetic import SyntheticBackend, synthetic_passages
from seakr_repro.methods import build_method
from seakr_repro.retrieval.base import Hit
from seakr_repro.runs.derived import derive, source
from seakr_repro.runs.runner import config_hash, read_results, run_method

SETTINGS = dict(k=4, sample_max_tokens=12, max_new_tokens=20, n_shot=2, max_reasoning_steps=3, max_docs=2)
WORK = ("llm_cache_hits", "computed_prompt_tokens", "computed_tokens", "seconds", "oom_seconds", "derived_from")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("derived")
    backend = CachedBackend(SyntheticBackend("syn", n_layers=4, hidden_size=16), root / "cache")
    docs = [Hit(p["id"], 1.0, p["text"], p.get("title", "")) for p in synthetic_passages(30)]
    searcher = FakeSearcher(docs, results=lambda q: docs[hash(q) % 20:][:3])
    records = load_dataset("bundled-2wiki", n=8, seed=3)
    return root, backend, searcher, records


def _run(setup, label, **over):
    root, backend, searcher, records = setup
    method = build_method("seakr", backend, searcher, "bundled-2wiki", **{**SETTINGS, **over})
    path = root / "runs" / f"{label}-{config_hash(method.config)}.jsonl"
    return method, path


def _without_work(rows):
    return {r["id"]: {k: v for k, v in r.items() if k not in WORK} for r in rows}


def _alike(a, b) -> bool:
    """Equal, floats to rounding: a row computed from the call cache reads its U from vectors
    that stand in for the model's with the same Gram matrix (`llm.cache`), the source's from the
    model's own, so they agree to about 1e-8."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_alike(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_alike(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("label,over", [("rationales-only", {"reasoning": "rationales"}),
                                        ("knowledge-only", {"reasoning": "knowledge"}),
                                        ("fixed", {"mode": "fixed", "forced_eos": "append"})])
def test_a_derived_row_is_the_row_its_run_writes(setup, tmp_path, label, over):
    root, backend, searcher, records = setup
    seakr, seakr_path = _run(setup, "seakr")
    run_method(seakr, records, seakr_path, backend=backend, progress=False)
    method, path = _run(setup, label, **over)
    assert source(method, path) is not None
    assert derive(method, path, records) == len(records)
    derived = read_results(path)
    computed_path = tmp_path / path.name          # the same run, computed
    computed = run_method(method, records, computed_path, backend=backend, progress=False)
    assert _alike(_without_work(derived), _without_work(computed))
    assert [r["answer"] for r in derived] == [r["answer"] for r in computed]     # answers: exactly
    assert all(r["llm_cache_hits"] == r["llm_calls"] > 0 and r["derived_from"]["file"] == seakr_path.name
               for r in derived)
    # nothing left to run: run_method finds every question answered
    assert len(run_method(method, records, path, backend=backend, progress=False)) == len(records)
    if label != "fixed":      # the path chosen differs from SeaKR's own choice somewhere
        seakr_rows = {r["id"]: r for r in read_results(seakr_path)}
        assert any(r["answer"] != seakr_rows[r["id"]]["answer"] or r["extra"]["choice"] !=
                   seakr_rows[r["id"]]["extra"]["choice"] for r in derived)


def test_a_row_without_a_source_is_left_to_run(setup):
    method, path = _run(setup, "estimator-energy", estimator="energy", delta=-20.0)
    assert source(method, path) is None and derive(method, path, setup[3]) == 0


# One process on the default profile: the run grid writes SeaKR's rows and derives Table 3's
# reasoning and fixed rows from them; each of those is then computed by run_method into a file of
# its own (its calls all hit the cache SeaKR filled). Prints both as JSON.
_DEFAULT_BOTH_WAYS = """
import json, sys
from pathlib import Path
from seakr_repro.artifacts import ABLATIONS, RunSpec
from seakr_repro.core.config import load_config
from seakr_repro.runs.engine import method_on, open_pool
from seakr_repro.runs.grid import deltas_for, method_settings, row_overrides, run_grid, select_questions
from seakr_repro.runs.inputs import open_profile_searcher
from seakr_repro.runs.runner import read_results, run_method
from seakr_repro.steps.prepare import ensure_index, prepare_datasets

cfg, out, labels = load_config("default"), Path(sys.argv[1]), sys.argv[2].split(",")
prepare_datasets(cfg)
ensure_index(cfg, progress=False)
pool, searcher = open_pool(cfg), open_profile_searcher(cfg)
specs = [RunSpec(label, "seakr", ABLATIONS[label]) for label in ["seakr"] + labels]
got = {}
for dataset in ("bundled-2wiki", "bundled-hotpotqa"):
    results, _ = run_grid(cfg, pool, searcher, specs, [dataset], 3, progress=False)
    records = select_questions(cfg, dataset, 3)
    for spec in specs[1:]:
        run_file = results.loc[results.method == spec.label, "run_file"].iloc[0]
        derived = read_results(out.parent / "results" / "default" / run_file)
        settings = {**method_settings(cfg, "seakr", deltas_for(cfg)), **row_overrides(cfg, spec.overrides)}
        method = method_on(pool.get(), "seakr", searcher, dataset, settings)
        computed = run_method(method, records, out / f"{dataset}-{spec.label}.jsonl", backend=pool.get(),
                              progress=False)
        got[f"{dataset}/{spec.label}"] = {"derived": derived, "computed": computed}
pool.close()
print(json.dumps(got))
"""


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_on_the_default_profile_derived_rows_equal_computed_ones(tmp_path):
    """The default profile's SeaKR on 3 questions of each multi-hop set: Table 3's
    rationales-only, knowledge-only and fixed rows derived from its file, and computed (their
    calls hit the cache SeaKR filled): the same answers. Minutes on a CPU (SmolLM2-135M)."""
    import os
    import subprocess
    import sys

    from seakr_repro.core.paths import CACHE_DIR, REPO_ROOT

    cache = tmp_path / "cache"
    cache.mkdir()
    for part in ("models", "gguf", "corpus", "indexes"):
        if (CACHE_DIR / part).is_dir():
            (cache / part).symlink_to((CACHE_DIR / part).resolve())
    env = {**os.environ, "SEAKR_RESULTS_DIR": str(tmp_path / "results"), "SEAKR_CACHE_DIR": str(cache)}
    (tmp_path / "computed").mkdir()
    got = subprocess.run([sys.executable, "-c", _DEFAULT_BOTH_WAYS, str(tmp_path / "computed"),
                          "rationales-only,knowledge-only,fixed"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=3500)
    assert got.returncode == 0, got.stderr[-3000:]
    both = json.loads(got.stdout.strip().splitlines()[-1])
    assert len(both) == 6
    for name, rows in both.items():
        derived, computed = rows["derived"], rows["computed"]
        assert all(r.get("derived_from") for r in derived), name
        assert [r["answer"] for r in derived] == [r["answer"] for r in computed], name
        assert _alike(_without_work(derived), _without_work(computed)), name
