"""Test tiers: fast by default; `--runslow` adds slow tests; GPU tests run only where CUDA is."""
import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none on this machine)")
    skip_slow = pytest.mark.skip(reason="slow: run with `make test-all` (--runslow)")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(skip_slow)


@pytest.fixture(scope="session")
def wiki_corpus(tmp_path_factory) -> dict:
    """The default corpus built fresh by the current code (~4 s), so the bundled questions are
    checked against exactly the passages a new clone produces, not a stale cached copy."""
    from seakr_repro.data.corpus import build_wiki_excerpt_corpus, load_corpus

    path = tmp_path_factory.mktemp("corpus") / "wiki-excerpt.jsonl"
    build_wiki_excerpt_corpus(path, progress=False)
    return load_corpus(path)
