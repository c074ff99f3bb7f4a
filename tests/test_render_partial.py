"""`render` while a method notebook is still running: its table comes from the run files as they
stand, rows marked "partial: n of N", in the paper's row order; other tables are not held back."""
import json

import pytest

from seakr_repro.runs import inputs, plan
from seakr_repro.steps import prepare, render
from seakr_repro.commands import status
from seakr_repro.core.config import load_config


@pytest.fixture
def half_run(tmp_path, monkeypatch):
    for module in (render, prepare, inputs):
        monkeypatch.setattr(module, "results_dir", lambda p: tmp_path / p)
    monkeypatch.setattr(status, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(plan, "RESULTS_ROOT", tmp_path)
    res = tmp_path / "default"
    (res / "data").mkdir(parents=True)
    (res / "data" / "bundled-2wiki.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "question": "?", "answers": ["Paris"]}) + "\n" for i in range(5)))
    runs = res / "runs" / "bundled-2wiki"
    runs.mkdir(parents=True)

    def write(name, n, correct):
        (runs / name).write_text("".join(json.dumps(
            {"id": f"q{i}", "answer": "Paris" if correct else "Rome", "golds": ["Paris"]}) + "\n"
            for i in range(n)))
    write("cot-aaaa.jsonl", 5, False)           # finished
    write("seakr-old0.jsonl", 1, False)         # an earlier configuration ...
    write("seakr-bbbb.jsonl", 3, True)          # ... and the run being written now (newest)
    import os
    os.utime(runs / "seakr-old0.jsonl", (1, 1))
    # a finished Table 7, to show the partial table does not hold back the others
    eff = res / "09-efficiency"
    eff.mkdir()
    eff.joinpath("results.csv").write_text("table,method,dataset,metric,value\n"
                                           "table7,seakr,bundled-2wiki,seconds_per_question,1.5\n")
    return tmp_path


def test_partial_table_from_run_files(half_run):
    cfg = load_config("default")
    frame, notes = render.partial_results(cfg, "table1")
    f1 = frame[frame.metric == "f1"].set_index("method")
    assert f1.loc["seakr", "value"] == 100.0 and f1.loc["seakr", "n"] == 3   # the newest file
    assert f1.loc["cot", "value"] == 0.0 and f1.loc["cot", "n"] == 5
    one_set = cfg.with_overrides({"datasets.complex": ["bundled-2wiki"]})
    assert set(render.partial_results(one_set, "table1")[1]) == {"seakr"}   # cot is done
    assert notes["seakr"] == ("partial: 3 of 5 questions on 2Wiki, HotpotQA not started "
                              "(run in progress)")     # HotpotQA is not even prepared here
    assert "cot" in notes                               # done on 2Wiki, not on HotpotQA
    md, _ = render.render_table(cfg, "table1", out_dir=half_run / "tables")
    text = md.read_text()
    assert "SEAKR (partial)" in text and "partial: 3 of 5 questions on 2Wiki" in text
    assert "Partial: its notebook has not finished" in text
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")][1:]
    assert rows.index("CoT (partial) (a)") < rows.index("SEAKR (partial) (b)")   # the paper's order


def test_the_recorded_current_file_wins_over_a_newer_older_configuration(half_run):
    """The row's latest run recorded its file (runner.mark_current): a file of another
    configuration touched later (copied back, say) is not taken for the run in progress."""
    import os

    from seakr_repro.runs.runner import mark_current
    runs = half_run / "default" / "runs" / "bundled-2wiki"
    mark_current(runs / "seakr-bbbb.jsonl")
    os.utime(runs / "seakr-old0.jsonl")                  # now the newest file
    f1 = render.partial_results(load_config("default"), "table1")[0].query("metric == 'f1'").set_index("method")
    assert f1.loc["seakr", "n"] == 3 and f1.loc["seakr", "value"] == 100.0


def test_render_all_goes_on_around_a_running_step(half_run, monkeypatch):
    monkeypatch.setattr(render, "TABLES_DIR", half_run / "tables")
    done = render.render_all(load_config("default")).set_index("table")["rendered"]
    assert done["table1_complex_qa"] == "partial"
    assert done["table2_simple_qa"] == "no"          # nothing of 05 yet
    assert done["table7_efficiency"] == "yes"


def test_seakr_runs_first_in_the_method_notebooks():
    import nbformat

    from seakr_repro.core.paths import NOTEBOOKS_DIR
    for name, key in (("04-complex-qa", "table1"), ("05-simple-qa", "table2")):
        source = "\n".join(c.source for c in nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", 4).cells)
        assert f'run_table("{key}", cfg' in source      # run_table runs SeaKR first


def test_paper_sized_profiles_are_comparable_with_the_paper():
    """paper-vllm runs the paper's model, data and constants on another backend: no caveat; a
    sample says so; the small profiles are not comparable."""
    assert render.differs_because(load_config("paper")) is None
    assert render.differs_because(load_config("paper-vllm")) is None
    assert "sample of 1000" in render.differs_because(load_config("paper-sample"))
    assert "not comparable" in render.differs_because(load_config("default"))


def test_official_runs_drop_failed_and_20_minute_questions_the_seakr_row_says_so(half_run):
    """main_multihop.py writes a question that raises or outlives asyncio.wait_for(..., 20*60) to
    failed.jsonl, out of the scored set (and cancels the run at the 10th error); the package keeps
    every question, and SeaKR's complex-QA row says how many would have gone."""
    cfg = load_config("default")
    runs = half_run / "default" / "runs" / "bundled-2wiki"
    runs.joinpath("seakr-bbbb.jsonl").write_text("".join(json.dumps(
        {"id": f"q{i}", "answer": "Paris", "golds": ["Paris"], "seconds": s}) + "\n"
        for i, s in enumerate((12.0, 1300.5, 1199.9))))
    text = render.render_table(cfg, "table1", out_dir=half_run / "tables")[0].read_text()
    seakr = next(line for line in text.splitlines() if line.startswith("(") and "SEAKR" in line)
    assert "fails or runs past 20 minutes" in seakr and "main_multihop.py" in seakr
    assert "1 of the 3 questions in this row's run files took over 20 minutes" in seakr
    cot = next(line for line in text.splitlines() if line.startswith("(") and "CoT" in line)
    assert "20 minutes" not in cot                        # only SeaKR's row: the official rule
    # simple QA (main_simpleqa.py) drops nothing: no note
    frame = render.pd.DataFrame([{"method": "seakr", "dataset": "bundled-single", "metric": "em",
                                  "value": 1.0, "run_file": "runs/bundled-single/seakr-x.jsonl"}])
    assert render.official_drop_note(cfg, render._table("table2"), frame) == {}
    assert set(render.official_drop_note(cfg, render._table("table1"), frame.assign(
        dataset="bundled-2wiki"))) == {"seakr"}
    # Table 4: SeaKR on every backbone, one row per model
    backbones = frame.assign(dataset="bundled-2wiki", model=["gemma-3-270m"])
    assert set(render.official_drop_note(cfg, render._table("table4"), backbones)) == {"gemma-3-270m"}
