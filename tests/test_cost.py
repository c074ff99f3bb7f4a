"""Question-runs per paper table and their hours at the paper's Table 7 pace (runs/cost.py)."""
import math

import pytest

from seakr_repro.artifacts import ABLATIONS, REASONING_ABLATIONS, methods
from seakr_repro.cli import main
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, UserError
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
    from seakr_repro.runs.preflight import Report, note_work

    for profile, hours in (("paper", True), ("default", False)):
        report = Report()
        note_work(load_config(profile), report)
        (line,) = report.ok
        assert line.startswith("work: ") and ("h at the paper's Table 7 pace" in line) == hours
        assert not report.problems


def _pace_file(path, *rows):
    """A measured-pace file of `rows`: (card, commit date, commit, settings, method, data set,
    seconds per question), the other columns filled in."""
    lines = [",".join(cost.MEASURED_COLUMNS)]
    lines += [f"{card},{date},{commit},2.11,float16,random,a test row,{settings},{method},{dataset},{s},made up"
              for card, date, commit, settings, method, dataset, s in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def pace_path(tmp_path, monkeypatch):
    """The measured-pace file `measured_paces` and the `cost` command read, in tmp_path (the
    committed one grows with every GPU run)."""
    path = tmp_path / "gpu_pace.csv"
    monkeypatch.setattr(cost, "MEASURED_PACE", path)
    return path


def test_each_cards_newest_row_per_method_and_set_gives_its_pace(pace_path):
    _pace_file(pace_path,
               ("Card A", "2026-02-01", "bbbbbbb", "paper", "seakr", "2wiki", 30.0),    # newer, above the older
               ("Card A", "2026-01-01", "aaaaaaa", "paper", "seakr", "2wiki", 50.0),
               ("Card A", "2026-01-01", "aaaaaaa", "paper", "cot", "2wiki", 2.0),
               ("Card A", "2026-01-01", "ccccccc", "paper", "cot", "2wiki", 3.0),       # same date: the later line
               ("Card A", "2026-03-01", "ddddddd", "paper-tiny", "seakr", "2wiki", 9.0),  # other settings
               ("Card B", "2026-01-01", "eeeeeee", "paper", "seakr", "2wiki", 70.0))
    got = cost.measured_paces()
    assert got["Card A"]["pace"] == {("seakr", "2wiki"): 30.0, ("cot", "2wiki"): 3.0}
    assert sorted(r["commit"] for r in got["Card A"]["rows"]) == ["bbbbbbb", "ccccccc"]
    assert got["Card B"]["pace"] == {("seakr", "2wiki"): 70.0}
    tiny = cost.measured_paces("paper-tiny")
    assert list(tiny) == ["Card A"] and tiny["Card A"]["pace"] == {("seakr", "2wiki"): 9.0}
    assert [r["commit"] for r in tiny["Card A"]["rows"]] == ["ddddddd"]


def test_cost_prices_the_profile_at_each_measured_card_beside_table_7(pace_path, capsys):
    # one measured set for SeaKR: every SeaKR row (all sets, ablations, backbones) takes its pace
    _pace_file(pace_path, ("Card A", "2026-01-01", "aaaaaaa", "paper", "seakr", "2wiki", 36.0))
    main(["cost", "--profile", "paper"])
    out = capsys.readouterr().out
    runs = cost.question_runs(load_config("paper"))
    n_seakr = int(runs.loc[runs["method"] == "seakr", "questions"].sum())
    assert ("measured on Card A (seakr 2wiki 36 s/question; commit aaaaaaa" in out
            and f"{n_seakr:,} of the question-runs take {n_seakr / 100:,.1f} hours on that card" in out)
    assert "Table 7 pace" in out                    # beside the paper's pace, not instead of it


def test_the_measured_pace_file_missing_or_without_its_columns_is_one_clear_error(pace_path, tmp_path):
    with pytest.raises(DataMissingError, match="measured GPU pace file is missing"):
        cost.measured_paces()
    (tmp_path / "bad.csv").write_text("card,method\nx,seakr\n")
    with pytest.raises(UserError, match="columns .* are missing"):
        cost.measured_paces(path=tmp_path / "bad.csv")


def test_the_committed_measured_pace_file_reads():
    """data/measured/gpu_pace.csv has the columns and positive paces (its numbers are not checked:
    every GPU run may add rows)."""
    for settings in ("paper", "paper-tiny"):
        for got in cost.measured_paces(settings).values():
            assert got["pace"] and all(s > 0 for s in got["pace"].values())
