"""Papermill smoke runs of every numbered notebook, in order, on the smoke profile.

Results go to a temporary results root (SEAKR_RESULTS_DIR), so a test never touches a real run;
shared caches (corpus, index, converted model) are reused. Each test reads back what its notebook
saved, as a user would.
"""
import json
import os

import pandas as pd
import pytest

from seakr_repro.core.config import load_config
from seakr_repro.pipeline import notebook_steps, run_notebook

pytestmark = pytest.mark.notebooks

# Tiny parameters per notebook: params/smoke.yaml, section notebooks (each notebook's first cell
# applies them, as under `reproduce --profile smoke`).
SMOKE_PARAMS: dict[str, dict] = load_config("smoke")["notebooks"]

# What each notebook must leave behind, relative to results/<profile>/.
EXPECTED = {
    "00-prepare-data": ["00-prepare-data/dataset_stats.csv", "00-prepare-data/corpus_summary.json",
                        "data/bundled-2wiki.jsonl", "data/bundled-single.jsonl"],
    "01-build-bm25-index": ["01-build-bm25-index/index_meta.json",
                            "01-build-bm25-index/sample_queries.json",
                            "01-build-bm25-index/supporting_recall.csv"],
    "02-extract-hidden-states": ["02-extract-hidden-states/questions.jsonl",
                                 "02-extract-hidden-states/summary.json"],
    "03-uncertainty-estimators": ["03-uncertainty-estimators/estimator_auroc.csv",
                                  "03-uncertainty-estimators/quality_vs_k.csv",
                                  "03-uncertainty-estimators/quality_vs_layer.csv",
                                  "03-uncertainty-estimators/delta_sweep.csv", "calibration/delta.json"],
    "04-complex-qa": ["04-complex-qa/results.csv", "04-complex-qa/skipped.json"],
    "05-simple-qa": ["05-simple-qa/results.csv"],
    "06-ablations": ["06-ablations/results.csv"],
    "07-backbones": ["07-backbones/results.csv", "07-backbones/calibration.csv"],
    "08-case-studies": ["08-case-studies/case_studies.md"],
    "09-efficiency": ["09-efficiency/results.csv"],
    "10-seed-methods": ["10-seed-methods/results.csv", "10-seed-methods/skr_labels.csv"],
    "11-mechanisms": ["11-mechanisms/trials.jsonl", "11-mechanisms/rerank.csv",
                      "11-mechanisms/retrieval_scores.csv", "11-mechanisms/summary.json",
                      "figures/smoke/mechanisms.png"],
    "90-render": ["tables/smoke/table1_complex_qa.md", "tables/smoke/table1_complex_qa.tex",
                  "tables/smoke/table3_ablations.tex", "tables/smoke/table7_efficiency.md",
                  "tables/smoke/claims.md",
                  "figures/smoke/figure3_k.png", "figures/smoke/table1_f1.pdf"],
}

# Images each notebook must show inline: Figure 3's three panels (03), the mechanisms (11), and
# 90's re-rendered figures (Tables 1/2's F1 and Figure 3 again).
SHOWS_IMAGES = {"03-uncertainty-estimators": 3, "11-mechanisms": 1, "90-render": 5}


@pytest.fixture(scope="module")
def results_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    redirected = {"SEAKR_RESULTS_DIR": root, "SEAKR_FIGURES_DIR": root / "figures",
                  "SEAKR_TABLES_DIR": root / "tables"}
    old = {k: os.environ.get(k) for k in redirected}
    os.environ.update({k: str(v) for k, v in redirected.items()})
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.mark.parametrize("notebook", notebook_steps(), ids=lambda p: p.stem)
def test_notebook_runs_headless(notebook, results_root, notebook_timeout):
    from seakr_repro import step_graph as graph
    from seakr_repro.artifacts import STEPS

    roots = graph.Roots(results_root / "smoke", results_root / "tables" / "smoke", results_root / "figures" / "smoke")
    owners = graph.output_owners(STEPS, roots)
    out = run_notebook(notebook, "smoke", out_dir=results_root / "smoke" / "notebooks", timeout=notebook_timeout,
                       progress=False)
    # it wrote no file another step declares (03 once saved 90's Figure 3 files): one writer each
    graph.check_wrote_own(notebook.stem, owners, graph.output_owners(STEPS, roots))
    executed = json.loads(out.read_text())
    outputs = [o for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # the first output: every parameter with the value that ran and where it came from
    table = "".join(outputs[0]["data"]["text/markdown"])
    assert "| `PROFILE` | `'smoke'` | command line" in table
    for name, value in SMOKE_PARAMS.get(notebook.stem, {}).items():
        assert f"| `{name}` | `{value!r}` | profile (params/" in table, (name, table)
    # quiet: no tqdm fallback warning in what the notebook shows
    shown = json.dumps([o.get("text", "") for o in outputs] +
                       [o.get("data", {}).get("text/markdown", "") for o in outputs])
    assert "TqdmWarning" not in shown and "IProgress" not in shown
    # a notebook that draws a figure shows it, as an image (not its path)
    images = sum("image/png" in o.get("data", {}) for o in outputs)
    assert images >= SHOWS_IMAGES.get(notebook.stem, 0), f"{notebook.stem} shows {images} image(s)"
    if notebook.stem == "90-render":
        assert any("claims" in "".join(o.get("data", {}).get("text/markdown", "")).lower()
                   for o in outputs), "90 does not show the claims ledger"
    for rel in EXPECTED.get(notebook.stem, []):
        rendered = rel.startswith(("tables/", "figures/"))
        path = results_root / rel if rendered else results_root / "smoke" / rel
        assert path.is_file() and path.stat().st_size > 0, f"{notebook.stem} did not write {rel}"
        if path.suffix in (".csv", ".json") and not rendered and path.parent.name != "calibration":
            assert (path.parent / (path.name + ".provenance.json")).is_file()
    # a table's step produced exactly its declared rows (numbers, or the reason why not)
    from seakr_repro.artifacts import TABLES
    for table in TABLES.values():
        if table.step == notebook.stem and table.kind == "grid":
            out = results_root / "smoke" / table.step
            produced = set(pd.read_csv(out / "results.csv")["method"])
            produced |= set(json.loads((out / "skipped.json").read_text()))
            assert produced == set(table.methods), f"{table.key}: {sorted(produced)}"
