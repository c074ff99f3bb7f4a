"""Question-runs per paper table and their hours at the paper's Table 7 pace (runs/cost.py)."""
import math

import pytest

from seakr_repro.artifacts import ABLATIONS, REASONING_ABLATIONS, methods
from seakr_repro.cli import main
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.core.paths import DATA_DIR
from seakr_repro.runs import cost, plan


def test_default_profile_counts_follow_the_declarations():
    cfg = load_config("default")
    runs = cost.question_runs(cfg)
    t1 = runs[runs["table"] == "table1"]
    assert sorted(set(t1["run"])) == sorted(methods("table1"))
    assert len(t1) == len(methods("table1")) * len(cfg["datasets.complex"])
    assert set(t1["questions"]) == {cfg["datasets.n_questions"]}
    t3 = runs[runs["table"] == "table3"]
    n_sets, n_simple = 3, 1                  # the default analysis sets: two complex, one simple
    assert len(t3) == len(ABLATIONS) * n_sets - len(REASONING_ABLATIONS) * n_simple
    assert set(t3["questions"]) == {cfg["analysis.n_questions"]}
    t4 = runs[runs["table"] == "table4"]
    assert set(t4["run"]) == set(cfg["backbones.models"]) and set(t4["method"]) == {"seakr"}
    t7 = runs[runs["table"] == "table7"]      # 09's N_QUESTIONS from the profile's notebooks entry
    assert set(t7["questions"]) == {cfg["notebooks"]["09-efficiency"]["N_QUESTIONS"]}


def test_paper_profiles_use_table_6_sizes_and_their_samples():
    paper = cost.question_runs(load_config("paper"))
    sizes = dict(zip(paper.loc[paper["table"] == "table1", "dataset"],
                     paper.loc[paper["table"] == "table1", "questions"]))
    assert sizes == {"2wiki": 12_576, "hotpotqa": 7_405, "iirc": 954}
    assert set(paper.loc[paper["table"] == "table3", "questions"]) == {500}
    sample = cost.question_runs(load_config("paper-sample"))
    sizes = dict(zip(sample.loc[sample["table"] == "table1", "dataset"],
                     sample.loc[sample["table"] == "table1", "questions"]))
    assert sizes == {"2wiki": 1000, "hotpotqa": 1000, "iirc": 954}     # IIRC's dev set is smaller


def test_hours_use_the_papers_pace_and_only_where_it_timed_the_method():
    cfg = load_config("paper")
    runs = cost.with_hours(cost.question_runs(cfg))
    t1 = runs[runs["table"] == "table1"].set_index(["run", "dataset"])
    assert t1.loc[("seakr", "2wiki"), "seconds_per_question"] == 4.94
    assert t1.loc[("dragin", "hotpotqa"), "seconds_per_question"] == 19.25
    # a set the paper did not time: the mean of its two
    assert math.isclose(t1.loc[("flare", "iirc"), "seconds_per_question"], (8.44 + 13.25) / 2)
    assert math.isclose(t1.loc[("seakr", "2wiki"), "hours"], 12_576 * 4.94 / 3600)
    assert math.isnan(t1.loc[("cot", "2wiki"), "hours"])
    backbones = runs[runs["table"] == "table4"]          # SeaKR with another model: SeaKR's pace
    assert backbones["seconds_per_question"].notna().all()
    table = cost.summary(runs).set_index("table")
    paced = runs[runs["hours"].notna()]
    assert table.loc["table1", "with_paper_pace"] == paced.loc[paced["table"] == "table1", "questions"].sum()
    assert table.loc["table1", "question_runs"] > table.loc["table1", "with_paper_pace"]


def test_notebook_parameter_profile_entry_wins_over_the_notebook():
    cfg = load_config("default")
    assert plan.notebook_parameter(cfg, "09-efficiency", "N_QUESTIONS") == 2     # params/default.yaml
    assert plan.notebook_parameter(cfg, "04-complex-qa", "N_QUESTIONS") is None     # the notebook's
    assert plan.notebook_parameter(load_config("smoke"), "04-complex-qa", "N_QUESTIONS") == 1


def test_cost_command_prints_the_table(capsys):
    main(["cost", "--profile", "paper"])
    out = capsys.readouterr().out
    assert "| 04-complex-qa" in out and "question-runs in Tables 1-4 and 7" in out
    assert "ARITHMETIC" in out


def test_the_papers_pace_is_applied_to_its_own_model_only(capsys):
    assert cost.pace_applies(load_config("paper")) and not cost.pace_applies(load_config("default"))
    main(["cost", "--profile", "default"])
    out = capsys.readouterr().out
    assert "hours" not in out.split("[cost]")[0]            # no hours column
    assert "no hours: the paper's Table 7 timed its own model, not smollm2-135m-instruct" in out


def test_preflight_reports_the_work_ahead():
    from seakr_repro.commands.preflight import Report, note_work

    for profile, hours in (("paper", True), ("default", False)):
        report = Report()
        note_work(load_config(profile), report)
        (line,) = report.ok
        assert line.startswith("work: ") and ("h at the paper's Table 7 pace" in line) == hours
        assert not report.problems


def test_measured_gpu_pace_prices_beside_table_7_naming_the_card(capsys, tmp_path):
    got = cost.measured_paces()
    assert got["H100 80GB"]["pace"] == {("seakr", "2wiki"): 89.45}      # paper settings only
    assert got["H100 80GB"]["rows"][0]["commit"] == "fa729e8"
    assert cost.measured_paces("paper-tiny")["H100 80GB"]["pace"][("cot", "*")] == 0.90
    main(["cost", "--profile", "paper"])
    out = capsys.readouterr().out
    runs = cost.question_runs(load_config("paper"))
    n_seakr = int(runs.loc[runs["method"] == "seakr", "questions"].sum())
    assert ("measured on H100 80GB (seakr 2wiki 89.45 s/question; commit fa729e8" in out
            and f"{n_seakr:,} of the question-runs take {n_seakr * 89.45 / 3600:,.1f} hours" in out)
    # a later GPU run adds a row: the card's newest row per method and data set wins
    text = (DATA_DIR / cost.MEASURED_PACE).read_text()
    newer = text.splitlines()[1].replace("2026-11-27,fa729e8", "2026-12-01,abc1234").replace("89.45", "12.5")
    (tmp_path / "p.csv").write_text(text + newer + "\n")
    assert cost.measured_paces(path=tmp_path / "p.csv")["H100 80GB"]["pace"] == {("seakr", "2wiki"): 12.5}
    (tmp_path / "bad.csv").write_text("card,method\nx,seakr\n")
    with pytest.raises(UserError, match="columns .* are missing"):
        cost.measured_paces(path=tmp_path / "bad.csv")
