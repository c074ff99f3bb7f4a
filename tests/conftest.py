"""Test tiers: fast by default; `--runslow` adds slow tests; GPU tests run only where CUDA is.
Tests write results under a temporary folder only, and the session fails if it changed the
checkout's results/ (checkout_guard.py)."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from checkout_guard import CHECKOUT_RESULTS, changes, listing, live_runs

# Set before the package is imported, so core.paths, notebook kernels and every subprocess a test
# starts derive it (a test that wants its own folder still sets SEAKR_RESULTS_DIR or patches paths).
SESSION_RESULTS = Path(tempfile.mkdtemp(prefix="seakr-test-results-"))
os.environ["SEAKR_RESULTS_DIR"] = str(SESSION_RESULTS)

import seakr_repro  # noqa: F401, E402  (first: a fair share of the cores before torch starts, core/threads.py)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The notebook smoke runs' time limit (per test, and per cell), on a quiet machine. A busy machine
# gets it multiplied by how much slower the decode-like step runs at collection than the quiet
# speed measured on the 2-core CI machine (benchmarks/contention.py), so a notebook that takes
# 25 s when quiet is not failed by a machine three times as busy.
NOTEBOOK_TIMEOUT = 900
QUIET_STEPS_PER_S = 75.0


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_sessionstart(session):
    session.config.checkout_results = listing(CHECKOUT_RESULTS)


def pytest_sessionfinish(session, exitstatus):
    """The checkout's results/ as the session found it, else the session fails naming what changed."""
    shutil.rmtree(SESSION_RESULTS, ignore_errors=True)
    changed = changes(session.config.checkout_results, listing(CHECKOUT_RESULTS))
    runs = live_runs(CHECKOUT_RESULTS)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if changed and runs:        # a real run beside the tests: its writes cannot be told from theirs
        if reporter is not None:
            reporter.write_line(f"\nthe checkout's results/ changed while a reproduce run held it "
                                f"({'; '.join(runs)}): not counted against the tests", yellow=True)
    elif changed:
        lines = [f"the tests changed the checkout's results/ ({CHECKOUT_RESULTS}); a test must write "
                 "under a temporary folder (tmp_path, SEAKR_RESULTS_DIR):", *changed[:20]]
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line("\n  ".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    skip_slow = pytest.mark.skip(reason="slow: run with `make test-all` (--runslow)")
    notebook_items = [item for item in items if "notebooks" in item.keywords]
    if notebook_items:
        config.notebook_timeout = scaled_notebook_timeout()
        for item in notebook_items:
            item.add_marker(pytest.mark.timeout(config.notebook_timeout))
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(skip_slow)


def scaled_notebook_timeout(probe_seconds: float = 0.5) -> int:
    from seakr_repro.benchmarks.contention import steps_per_second

    slowdown = max(1.0, QUIET_STEPS_PER_S / max(steps_per_second(probe_seconds), 1e-3))
    return int(NOTEBOOK_TIMEOUT * slowdown)


@pytest.fixture(scope="session")
def notebook_timeout(pytestconfig) -> int:
    """Seconds per notebook cell for the smoke runs (see NOTEBOOK_TIMEOUT)."""
    return getattr(pytestconfig, "notebook_timeout", NOTEBOOK_TIMEOUT)


@pytest.fixture(scope="session")
def wiki_corpus(tmp_path_factory) -> dict:
    """The default corpus built fresh by the current code (~4 s), so the bundled questions are
    checked against exactly the passages a new clone produces, not a stale cached copy."""
    from seakr_repro.data.corpus import build_wiki_excerpt_corpus, load_corpus

    path = tmp_path_factory.mktemp("corpus") / "wiki-excerpt.jsonl"
    build_wiki_excerpt_corpus(path, progress=False)
    return load_corpus(path)
