"""The paper profile end to end, as a researcher would run it, on stand-ins in the official formats.

`reproduce --profile paper-tiny` (params/paper-tiny.yaml: `paper` with only the sizes shrunk) runs
every notebook, 00-11 and 90, in a subprocess whose data, cache and results folders are temporary
(SEAKR_RAW_DIR and friends) and whose inputs `tests/paper_shaped.py` writes: a random float16
LLaMA at model.path, DPR's TSV, the dev sets in DRAGIN's and SeaKR's layouts, the top-10 files,
DPR's retriever dev file, the training files and stand-in clones of the official repositories.
The tests then read back what the run wrote and check that the paper profile's own code paths
ran, not the default profile's.
"""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from paper_shaped import build_raw, cli, overrides
from seakr_repro.core.config import load_config
from seakr_repro.pipeline import notebook_steps

# the module's fixture runs the whole reproduce (about 5 minutes on 2 busy cores) inside its first
# test: `make test-heavy`, CI's second step, so that `make test` stays under 30 minutes (docs/tests.md)
pytestmark = [pytest.mark.notebooks, pytest.mark.heavy, pytest.mark.timeout(2400)]
PROFILE = "paper-tiny"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper-shaped")
    made = build_raw(root)
    sets = overrides(made)
    pre = cli(root, "preflight", "--profile", PROFILE, *sets, timeout=300)
    done = cli(root, "reproduce", "--profile", PROFILE, *sets, timeout=2100)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    return {"root": root, "made": made, "preflight": pre, "out": done.stdout,
            "results": root / "results" / PROFILE}


def test_preflight_finds_every_piece_of_the_paper_profile(run):
    pre = run["preflight"]
    assert pre.returncode == 0, pre.stdout + pre.stderr
    out = pre.stdout
    assert "everything needed is in place" in out
    for piece in ("model llama-2-7b-chat", "model llama-2-7b", "model selfrag-llama2-7b",
                  "SeaKR's clone", "top-10 passages of nq", "top-10 passages of squad",
                  "data set iirc", "data set hotpotqa"):
        assert piece in out, piece
    if "dragin_repo" in (load_config("base")["prompts"] or {}):    # issue 21's faithful baselines
        assert "DRAGIN's clone" in out
    # the LLaMA-3 backbones are absent: their rows are skipped, with the setting that names them
    assert "the llama-3-8b row of Table 4" in out and "model.paths.llama-3-8b" in out


def test_every_notebook_ran_and_left_its_artifacts(run):
    res = run["results"]
    for nb in notebook_steps():
        executed = res / "notebooks" / nb.name
        assert executed.is_file(), nb.name
        cells = json.loads(executed.read_text())["cells"]
        assert not [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
                    if o.get("output_type") == "error"], nb.name
    root = run["root"]
    for rel in ("00-prepare-data/dataset_stats.csv", "01-build-bm25-index/index_meta.json",
                "02-extract-hidden-states/summary.json", "03-uncertainty-estimators/estimator_auroc.csv",
                "04-complex-qa/results.csv", "05-simple-qa/results.csv", "06-ablations/results.csv",
                "07-backbones/results.csv", "08-case-studies/case_studies.md", "09-efficiency/results.csv",
                "10-seed-methods/results.csv", "11-mechanisms/summary.json", "11-mechanisms/rerank.csv"):
        assert (res / rel).is_file() and (res / rel).stat().st_size > 0, rel
    for rel in ("tables/paper-tiny/table1_complex_qa.md", "tables/paper-tiny/table2_simple_qa.md",
                "tables/paper-tiny/table3_ablations.md", "tables/paper-tiny/table4_backbones.md",
                "tables/paper-tiny/table7_efficiency.md", "tables/paper-tiny/claims.md",
                "figures/paper-tiny/figure3_delta.png", "figures/paper-tiny/mechanisms.png"):
        assert (root / rel).is_file(), rel


def _rows(run, step: str) -> pd.DataFrame:
    return pd.read_csv(run["results"] / step / "results.csv")


def _run_lines(run, rel: str) -> list[dict]:
    return [json.loads(line) for line in (run["results"] / rel).read_text().splitlines() if line.strip()]


def _cells(df: pd.DataFrame, method: str) -> dict[str, str]:
    """dataset -> run file of one row."""
    return dict(df[(df.method == method) & (df.metric == "f1")][["dataset", "run_file"]].values)


def _settings_hash(run_file: str) -> str:
    """runs/<set>/<row>-<hash of the method's settings>.jsonl -> the hash."""
    return run_file.rsplit("-", 1)[1]


def test_the_paper_profiles_own_paths_ran(run):
    from seakr_repro.prompts import build_prompt, demos_for

    res = run["results"]
    # es_best_fields over DPR's TSV
    meta = json.loads((res / "01-build-bm25-index" / "index_meta.json").read_text())
    assert meta["scheme"] == "es_best_fields" and meta["doc_count"] == meta["corpus_lines"] > 300
    # the dev sets in DRAGIN's and SeaKR's layouts, every table row on them
    t1, t2 = _rows(run, "04-complex-qa"), _rows(run, "05-simple-qa")
    assert set(t1.dataset) == {"2wiki", "hotpotqa", "iirc"} and set(t2.dataset) == {"nq", "triviaqa", "squad"}
    assert set(t1.method) == {"cot", "ircot", "self_rag", "flare", "dragin", "seakr"}
    assert set(t2.method) == {"cot", "self_rag", "flare", "dragin", "seakr"}
    # SeaKR runs as the official code does: its settings are Table 3's `faithful` row's (same
    # settings hash), not the `fixed` row's
    t3 = _rows(run, "06-ablations")
    faithful, fixed = _cells(t3, "faithful"), _cells(t3, "fixed")
    seakr = {**_cells(t1, "seakr"), **_cells(t2, "seakr")}
    assert set(faithful) == {"2wiki", "hotpotqa", "nq"}
    for dataset, rel in faithful.items():
        assert _settings_hash(rel) == _settings_hash(seakr[dataset]) != _settings_hash(fixed[dataset])
    steps = {d: [s for r in _run_lines(run, rel) for s in r["trace"]] for d, rel in seakr.items()}
    # delta -6 (the official constant, not step 03's calibrated one) gates every decision
    for dataset, trace in steps.items():
        deltas = [s["delta"] for s in trace if "delta" in s]
        assert deltas and set(deltas) == {-6.0}, dataset
    # simple QA: the official prompt (the clone's SingleQA examples) and DPR's top-10 passages from
    # the packed files (their passages carry no ids: q<i>-<j>), never a BM25 search of the TSV
    clone = run["made"]["seakr"]
    for dataset in ("nq", "triviaqa", "squad"):
        rows = _run_lines(run, seakr[dataset])
        first = [s for s in rows[0]["trace"] if s["kind"] == "direct"][0]
        official = build_prompt(demos_for(dataset, 2, "official", str(clone)), rows[0]["question"])
        paper = build_prompt(demos_for(dataset, 2, "paper"), rows[0]["question"])
        assert first["prompt_chars"] == len(official) != len(paper), dataset
        hits = [h["id"] for s in steps[dataset] if s["kind"] == "passages" for h in s["hits"]]
        assert hits and all(re.fullmatch(r"q\d+-\d+", h) for h in hits), (dataset, hits)
    # complex QA retrieved from the corpus (the TSV's numeric ids)
    assert any(s.get("hits") for d in ("2wiki", "hotpotqa", "iirc") for s in steps[d])
    # Self-RAG ran on its own checkpoint; Table 4: the given backbones ran, the absent ones skipped
    assert set(t1[t1.method == "self_rag"].model) == {"selfrag-llama2-7b"}
    t4 = _rows(run, "07-backbones")
    assert set(t4.model) == {"llama-2-7b-chat", "llama-2-7b"}
    skipped = json.loads((res / "07-backbones" / "skipped.json").read_text())
    assert set(skipped) == {"llama-3-8b", "llama-3-8b-instruct"}
    assert "model.paths.llama-3-8b" in skipped["llama-3-8b"]      # the setting that would fill it
    # step 02 ran on the profile's float16 model, notebook 11 on DPR's NQ dev with gold passages
    summary = json.loads((res / "02-extract-hidden-states" / "summary.json").read_text())
    assert summary["model"] == "llama-2-7b-chat" and summary["layers"] == 4
    assert json.loads((res / "11-mechanisms" / "summary.json").read_text())["dataset"] == "nq-dev-gold"


def test_simple_qa_questions_come_from_the_top10_files(run):
    res = run["results"]
    squad = [json.loads(line) for line in (res / "data" / "squad.jsonl").read_text().splitlines()]
    made = json.loads((run["made"]["raw"] / "singlehop_data" / "sq_top10.json").read_text())
    assert {r["question"] for r in squad} <= {m["question"] for m in made}
    stats = pd.read_csv(res / "00-prepare-data" / "dataset_stats.csv")
    assert stats.set_index("dataset").loc["squad", "unmatched_questions"] == 1


def test_notebook10_trained_on_the_official_training_files(run):
    labels = pd.read_csv(run["results"] / "10-seed-methods" / "skr_labels.csv").set_index("dataset")
    assert set(labels.index) == {"2wiki", "hotpotqa", "iirc", "nq", "triviaqa", "squad"}
    assert all(src.endswith("(official training split)") for src in labels.train_source), labels.train_source
