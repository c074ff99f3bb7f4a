"""Papermill smoke runs of every numbered notebook, in order, on the smoke profile.

Results go to a temporary results root (SEAKR_RESULTS_DIR), so a test never touches a real run;
shared caches (corpus, index, converted model) are reused. Each test reads back what its notebook
saved, as a user would.
"""
import json
import os

import pytest

from seakr_repro.pipeline import notebook_steps, run_notebook

pytestmark = pytest.mark.notebooks

# Tiny parameters per notebook (on top of PROFILE="smoke").
SMOKE_PARAMS: dict[str, dict] = {}

# What each notebook must leave behind, relative to results/<profile>/.
EXPECTED = {
    "00-prepare-data": ["00-prepare-data/dataset_stats.csv", "00-prepare-data/corpus_summary.json",
                        "data/bundled-2wiki.jsonl", "data/bundled-single.jsonl"],
    "01-build-bm25-index": ["01-build-bm25-index/index_meta.json",
                            "01-build-bm25-index/sample_queries.json",
                            "01-build-bm25-index/supporting_recall.csv"],
}


@pytest.fixture(scope="module")
def results_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    old = os.environ.get("SEAKR_RESULTS_DIR")
    os.environ["SEAKR_RESULTS_DIR"] = str(root)
    yield root
    if old is None:
        os.environ.pop("SEAKR_RESULTS_DIR", None)
    else:
        os.environ["SEAKR_RESULTS_DIR"] = old


@pytest.mark.parametrize("notebook", notebook_steps(), ids=lambda p: p.stem)
def test_notebook_runs_headless(notebook, results_root):
    out = run_notebook(notebook, "smoke", SMOKE_PARAMS.get(notebook.stem, {}),
                       out_dir=results_root / "smoke" / "notebooks", timeout=900, progress=False)
    executed = json.loads(out.read_text())
    errors = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    for rel in EXPECTED.get(notebook.stem, []):
        path = results_root / "smoke" / rel
        assert path.is_file() and path.stat().st_size > 0, f"{notebook.stem} did not write {rel}"
        if path.suffix in (".csv", ".json"):
            assert (path.parent / (path.name + ".provenance.json")).is_file()
