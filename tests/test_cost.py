"""What a profile costs (seakr_repro/price/): its question-runs, the units of work a run's files
record per step, their sizes at the profile's scale, their paces, and the prediction beside a
run. The dry run itself, and the smoke prediction against real smoke runs, are in
tests/test_cost_against_run.py (slow)."""
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from seakr_repro.artifacts import ABLATIONS, REASONING_ABLATIONS, methods
from seakr_repro.cli import main
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.price import estimate, paces
from seakr_repro.llm.sampling_settings import Sampling
from seakr_repro.runs import plan

CANNED = Path(__file__).parent / "fixtures" / "cost" / "smoke_dry_run.json"


# ------------------------------------------------------------------------------ the plan's counts
def test_default_profile_counts_follow_the_declarations():
    cfg = load_config("default")
    runs = plan.question_runs(cfg)
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


def test_as_run_the_plan_adds_notebook_10_and_keeps_notebook_09s_methods():
    smoke = load_config("smoke")
    runs = plan.question_runs(smoke, as_run=True)
    assert set(runs.loc[runs["table"] == "table7", "run"]) == {"cot", "seakr"}     # smoke's METHODS
    seed = runs[runs["table"] == "seed"]
    assert set(seed["notebook"]) == {"10-seed-methods"} and set(seed["questions"]) == {1}
    assert {"seakr", "taikc-kbae", "skr-knn"} <= set(seed["run"])


def test_paper_profiles_use_table_6_sizes_and_their_samples():
    paper = plan.question_runs(load_config("paper"))
    sizes = dict(zip(paper.loc[paper["table"] == "table1", "dataset"],
                     paper.loc[paper["table"] == "table1", "questions"]))
    assert sizes == {"2wiki": 12_576, "hotpotqa": 7_405, "iirc": 954}
    assert set(paper.loc[paper["table"] == "table3", "questions"]) == {500}
    sample = plan.question_runs(load_config("paper-sample"))
    sizes = dict(zip(sample.loc[sample["table"] == "table1", "dataset"],
                     sample.loc[sample["table"] == "table1", "questions"]))
    assert sizes == {"2wiki": 1000, "hotpotqa": 1000, "iirc": 954}     # IIRC's dev set is smaller


def test_notebook_parameter_profile_entry_wins_over_the_notebook():
    cfg = load_config("default")
    assert plan.notebook_parameter(cfg, "09-efficiency", "N_QUESTIONS") == 2     # params/default.yaml
    assert plan.notebook_parameter(cfg, "04-complex-qa", "N_QUESTIONS") is None     # the notebook's
    assert plan.notebook_parameter(load_config("smoke"), "04-complex-qa", "N_QUESTIONS") == 1


def test_a_step_adds_only_the_questions_an_earlier_step_did_not_ask_of_a_shared_run_file():
    """Steps 04, 06 and 10 share SeaKR's run files: on the paper profile 04 answers every question
    and 06's 500 are among them; Table 7 times its own questions in its own folder."""
    cfg = load_config("paper")
    units = pd.DataFrame([{"step": s, "run": "seakr", "dataset": "2wiki", "questions": 3} for s in
                          ("04-complex-qa", "06-ablations", "09-efficiency", "10-seed-methods")])
    got = dict(zip(units["step"], estimate.planned_questions(cfg, units, {})[0]))
    assert got == {"04-complex-qa": 12_576, "06-ablations": 0, "09-efficiency": 100, "10-seed-methods": 0}


def test_the_preflight_line_keeps_the_papers_arithmetic():
    from seakr_repro.runs.preflight import Report, note_work

    for profile, hours in (("paper", True), ("default", False)):
        report = Report()
        note_work(load_config(profile), report)
        (line,) = report.ok
        assert line.startswith("work: ") and ("h at the paper's Table 7 pace" in line) == hours
        assert not report.problems


# ------------------------------------------------------------------------------ a run's recorded work
def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_shared_run_files_rows_belong_to_the_first_step_that_asked_for_them(tmp_path):
    """In smoke, 04 asks one question of bundled-2wiki and 06 one (seeded: maybe another); SeaKR's
    file holds both, and each row counts once, for the first step whose questions include it."""
    from seakr_repro.price.work import recorded_work
    from seakr_repro.data.records import sample

    cfg = load_config("smoke")
    ids = [f"q{i}" for i in range(3)]
    _write(tmp_path / "data" / "bundled-2wiki.jsonl", [{"id": i} for i in ids])
    seed = cfg["datasets.sample_seed"]
    first, analysed = sample(ids, 1, seed)[0], sample(ids, 1, seed)[0]   # 04's N_QUESTIONS 1, 06's 1
    other = next(i for i in ids if i != first)
    row = dict(llm_calls=5, llm_cache_hits=1, prompt_tokens=50, tokens=9, computed_prompt_tokens=40,
               computed_tokens=7)
    _write(tmp_path / "runs" / "bundled-2wiki" / "seakr-abc.jsonl",
           [{"id": first, **row}, {"id": other, **row}])       # `other`: asked by no step
    work = recorded_work(cfg, tmp_path).set_index(["step", "run", "dataset"])
    assert work.loc[("04-complex-qa", "seakr", "bundled-2wiki"), "questions"] == 1
    assert work.loc[("04-complex-qa", "seakr", "bundled-2wiki"), "llm_calls"] == 5
    assert work.loc[("06-ablations", "seakr", "bundled-2wiki"), "questions"] == (analysed != first)
    assert work["questions"].sum() == 1


def test_steps_02_10_and_11_count_their_calls_in_their_own_files(tmp_path):
    from seakr_repro.price.work import calibration_sizes, recorded_work
    from seakr_repro.steps.extraction import calibration_records

    cfg = load_config("smoke")
    calls = dict(llm_calls=3, llm_cache_hits=0, prompt_tokens=30, tokens=6, computed_prompt_tokens=30,
                 computed_tokens=6)
    ids = [r.id for r in calibration_records(3, 2, seed=cfg["seed"])]
    _write(tmp_path / "02-extract-hidden-states" / "questions.jsonl",
           [{"id": i, "calls": calls} for i in ids] + [{"id": "not-asked", "calls": calls}])
    (tmp_path / "10-seed-methods").mkdir()
    (tmp_path / "10-seed-methods" / "training_calls.json").write_text(json.dumps(
        [{"work": "skr-labels", "dataset": "bundled-2wiki", "questions": 4, **calls}]))
    _write(tmp_path / "11-mechanisms" / "trials.jsonl", [{"id": "t1", "calls": calls}, {"id": "t2"}])
    work = recorded_work(cfg, tmp_path).set_index(["step", "run", "dataset"])
    assert work.loc[("02-extract-hidden-states", "extraction", "calibration"), "llm_calls"] == 3 * len(ids)
    assert calibration_sizes(cfg)["extraction"] == len(ids) == 5
    assert work.loc[("10-seed-methods", "skr-labels", "bundled-2wiki"), "questions"] == 4
    trials = work.loc[("11-mechanisms", "trials", "bundled-single")]
    assert trials["questions"] == 2 and math.isnan(trials["llm_calls"])      # t2 counted nothing


# ------------------------------------------------------------------------------ scaling and pricing
def _canned():
    return json.loads(CANNED.read_text())


def test_a_whole_dry_run_is_taken_as_it_counted_and_a_sample_is_scaled_with_its_error():
    cfg = load_config("smoke")
    work = pd.DataFrame(_canned()["work"])
    whole = estimate.scale(cfg, work)
    assert whole["calls"].sum() == work["llm_calls"].sum() and (whole["calls_se"] == 0).all()
    # the same work read as a sample of a profile 10 times the size: 10 times the calls, with an error
    unit = work[(work["step"] == "04-complex-qa") & (work["run"] == "seakr")].iloc[[0]]
    unit = pd.concat([unit, unit.assign(llm_calls=unit["llm_calls"] * 2, questions=2,
                                        calls_sq=unit["calls_sq"] * 2 + unit["llm_calls"] ** 2 * 3)])
    unit = unit.iloc[[1]].assign(calls_sq=unit["llm_calls"].iloc[0] ** 2 * 5)    # two questions, 1x and 2x
    big = load_config("smoke", {"datasets.n_questions": None, "notebooks.04-complex-qa.N_QUESTIONS": 20})
    got = estimate.scale(big, unit, {}).iloc[0]
    per = unit["llm_calls"].iloc[0] / 2
    assert got["planned"] == 20 and got["calls"] == pytest.approx(per * 20) and got["calls_se"] > 0


def test_look_alike_units_stand_for_each_set_the_profile_plans_them_on():
    cfg = load_config("paper")
    work = pd.DataFrame([
        {"step": "04-complex-qa", "run": "seakr", "dataset": "bundled-2wiki", "questions": 2},
        {"step": "11-mechanisms", "run": "trials", "dataset": "bundled-single", "questions": 2},
        {"step": "10-seed-methods", "run": "skr-labels", "dataset": "bundled-single", "questions": 2}])
    stand = {"2wiki": "bundled-2wiki", "iirc": "bundled-2wiki", "nq": "bundled-single",
             "triviaqa": "bundled-single", "nq-dev-gold": "bundled-single"}
    got = set(zip(*[estimate.answered_for(cfg, work, stand)[c] for c in ("step", "run", "dataset")]))
    assert got == {("04-complex-qa", "seakr", "2wiki"), ("04-complex-qa", "seakr", "iirc"),
                   ("11-mechanisms", "trials", "nq-dev-gold"),           # 11 answers its own set only
                   ("10-seed-methods", "skr-labels", "nq"), ("10-seed-methods", "skr-labels", "triviaqa")}


def _units(**cols):
    base = {"step": "04-complex-qa", "table": "table1", "run": "seakr", "method": "seakr", "dataset": "2wiki",
            "question_runs": 10, "calls": 40.0, "unique": 20.0, "prompt_tokens": 0.0, "generated_tokens": 0.0,
            "derived": 0.0, "planned": 10.0, "dry_questions": 10.0, "calls_se": 0.0, "unique_se": 0.0}
    return pd.DataFrame([{**base, **c} for c in cols.get("rows", [{}])])


def _cpu(**steps):
    """{step: (seconds, unit, units[, fixed seconds])} as `paces.cpu_paces` gives them."""
    return {"run": "r", "steps": {s: {"seconds": sec, "unit": unit, "units": n, "fixed": fixed,
                                      "per_unit": (sec - fixed) / n, "off": "not checked"}
                                  for s, (sec, unit, n, *rest) in steps.items() for fixed in [(rest or [0.0])[0]]}}


def test_a_cpu_record_prices_each_computed_call_at_its_steps_pace():
    cpu = _cpu(**{"04-complex-qa": (100.0, paces.PER_CALL, 50.0), "00-prepare-data": (7.0, paces.PER_STEP, 1.0),
                  "05-simple-qa": (9.0, paces.PER_STEP, 1.0)})
    units = _units(rows=[{"unique": 20.0}, {"run": "cot", "method": "cot", "unique": 5.0},
                         {"step": "05-simple-qa", "unique": 4.0}])
    got = estimate.price(load_config("smoke"), units, cpu).set_index(["step", "run"])
    # 00 as recorded (no calls); 2 s per computed call in 04; 05 was recorded without a computed call
    assert got.loc[("00-prepare-data", "(no model calls)"), "hours: CPU: r"] * 3600 == pytest.approx(7.0)
    assert list(got.loc["04-complex-qa", "hours: CPU: r"] * 3600) == pytest.approx([40.0, 10.0])
    assert got.loc[("05-simple-qa", "seakr"), "pace"] == "no pace"


def test_a_steps_fixed_seconds_are_priced_once_and_its_calls_at_the_rest(tmp_path):
    """Two profiles recorded on one machine: a step's fixed seconds are the intercept of the line
    through their (prompt tokens, seconds); an intercept below 0 leaves none."""
    rows = [("smoke", "04-complex-qa", 46.6, 53, 18337), ("smoke", "05-simple-qa", 5.0, 17, 5592),
            ("default", "04-complex-qa", 352.4, 348, 173858), ("default", "05-simple-qa", 109.1, 144, 63651)]
    pd.DataFrame([{"profile": p, "run": f"{p} run", "commit": "abc", "machine": "m", "step": st, "seconds": sec,
                   "unit": paces.PER_CALL, "computed_calls": c, "prompt_tokens": t, "generated_tokens": 0,
                   "off": "", "note": ""} for p, st, sec, c, t in rows]).to_csv(tmp_path / "pace.csv", index=False)
    cpu = paces.cpu_paces("default", path=tmp_path / "pace.csv")
    slope = (352.4 - 46.6) / (173858 - 18337)
    assert cpu["steps"]["04-complex-qa"]["fixed"] == pytest.approx(352.4 - slope * 173858)     # ~10.9 s
    assert cpu["steps"]["05-simple-qa"]["fixed"] == 0.0          # the line crosses 0 below 0 tokens
    units = _units(rows=[{"unique": 174.0}])                     # half the recorded run's calls
    got = estimate.price(load_config("default"), units, cpu).set_index(["step", "run"])
    got = got["hours: CPU: default run"] * 3600
    fixed = cpu["steps"]["04-complex-qa"]["fixed"]
    assert got[("04-complex-qa", "(fixed seconds)")] == pytest.approx(fixed)
    assert got[("04-complex-qa", "seakr")] == pytest.approx((352.4 - fixed) / 2)


def test_doubling_the_questions_doubles_the_hours_of_the_steps_it_reaches():
    """The canned smoke dry run read as a sample of the profile with twice its questions: the
    steps whose questions `datasets.n_questions` sizes (04, 05: every question of their sets)
    take twice the hours at the CPU pace; step 02's calibration set does not move."""
    from seakr_repro.price.work import calibration_sizes

    work = pd.DataFrame(_canned()["work"])
    cpu = _cpu(**{s: (10.0, paces.PER_CALL, 10.0) for s in set(work["step"])})
    hours = {}
    for n in (2, 4):
        cfg = load_config("smoke", {"datasets.n_questions": n, "notebooks.04-complex-qa.N_QUESTIONS": None,
                                    "notebooks.05-simple-qa.N_QUESTIONS": None})
        priced = estimate.price(cfg, estimate.scale(cfg, work, calibration_sizes(cfg)), cpu)
        hours[n] = estimate.notebooks(priced).set_index("step")["hours: CPU: r"]
    ratio = hours[4] / hours[2]
    assert ratio[["04-complex-qa", "05-simple-qa"]].tolist() == pytest.approx([2.0, 2.0], rel=0.1)
    assert ratio["02-extract-hidden-states"] == pytest.approx(1.0)


def test_table_7_and_a_card_price_only_the_methods_they_timed():
    table7 = {("seakr", "2wiki"): 5.0, ("seakr", "hotpotqa"): 7.0}
    timed = {"step": "09-efficiency", "table": "table7", "calls": 20.0, "unique": 20.0, "planned": 2.0}
    units = _units(rows=[{}, timed, {"run": "cot", "method": "cot"}])
    cards = {"Card A": {"per_call": {("seakr", "2wiki"): 3.0}, "rows": []}}
    got = estimate.price(load_config("paper"), units, None, cards, table7)
    # Table 7: 5 s per question over 10 calls per question (09's) = 0.5 s per call; the card: SeaKR's
    # calls at its SeaKR row (another set at the mean of its sets), CoT's at none
    assert list(got["pace"]) == ["Table 7, GPU: Card A", "Table 7, GPU: Card A", "no pace"]
    assert list(got["hours: Table 7"].fillna(-1) * 3600) == pytest.approx([20 * 0.5, 20 * 0.5, -3600])
    assert list(got["hours: GPU: Card A"].fillna(-1) * 3600) == pytest.approx([20 * 3.0, 20 * 3.0, -3600])
    nb = estimate.notebooks(got).set_index("step")          # each pace summed apart, with what it prices
    assert nb.loc["04-complex-qa", "question-runs at Table 7"] == 10 < nb.loc["04-complex-qa", "question_runs"]
    assert nb.loc["04-complex-qa", "question-runs at GPU: Card A"] == 10


def test_beside_puts_a_runs_recorded_calls_and_seconds_next_to_the_prediction():
    predicted = pd.DataFrame([{"step": "04-complex-qa", "calls": 100.0, "unique": 50.0, "derived": 1.0,
                               "hours: CPU: r": 0.1}])
    actual = pd.DataFrame([{"step": "04-complex-qa", "questions": 2, "llm_calls": 90, "llm_cache_hits": 45,
                            "derived": 1}])
    row = estimate.beside(predicted, actual, {"04-complex-qa": 400.0, "00-prepare-data": 5.0}).set_index("step")
    assert row.loc["04-complex-qa", "calls actual/predicted"] == pytest.approx(0.9)
    assert row.loc["04-complex-qa", "unique actual/predicted"] == pytest.approx(0.9)
    assert row.loc["04-complex-qa", "seconds actual/predicted"] == pytest.approx(400 / 360)
    assert row.loc["04-complex-qa", "derived actual/predicted"] == 1.0
    assert row.loc["00-prepare-data", "seconds actual"] == 5.0


# ------------------------------------------------------------------------------ the measured paces
def _pace_file(path, *rows):
    """A measured-pace file of `rows`: (card, commit date, commit, settings, method, data set,
    seconds per question[, calls per question]), the other columns filled in."""
    lines = [",".join(paces.MEASURED_COLUMNS + (paces.CALLS_COLUMN,))]
    lines += [f"{r[0]},{r[1]},{r[2]},2.11,float16,random,a test row,{r[3]},{r[4]},{r[5]},{r[6]},made up,"
              f"{r[7] if len(r) > 7 else ''}" for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def pace_path(tmp_path, monkeypatch):
    """The measured-pace file `measured_paces` reads, in tmp_path (the committed one grows with
    every GPU run)."""
    path = tmp_path / "gpu_pace.csv"
    monkeypatch.setattr(paces, "MEASURED_PACE", path)
    return path


def test_each_cards_newest_row_per_method_and_set_gives_its_pace(pace_path):
    _pace_file(pace_path,
               ("Card A", "2026-02-01", "bbbbbbb", "paper", "seakr", "2wiki", 30.0, 10),   # newer, above
               ("Card A", "2026-01-01", "aaaaaaa", "paper", "seakr", "2wiki", 50.0),
               ("Card A", "2026-01-01", "aaaaaaa", "paper", "cot", "2wiki", 2.0),
               ("Card A", "2026-01-01", "ccccccc", "paper", "cot", "2wiki", 3.0),       # same date: the later line
               ("Card A", "2026-03-01", "ddddddd", "paper-tiny", "seakr", "2wiki", 9.0),  # other settings
               ("Card B", "2026-01-01", "eeeeeee", "paper", "seakr", "2wiki", 70.0))
    got = paces.measured_paces()
    assert got["Card A"]["pace"] == {("seakr", "2wiki"): 30.0, ("cot", "2wiki"): 3.0}
    assert got["Card A"]["per_call"] == {("seakr", "2wiki"): 3.0}       # 30 s over 10 calls
    assert sorted(r["commit"] for r in got["Card A"]["rows"]) == ["bbbbbbb", "ccccccc"]
    assert got["Card B"]["pace"] == {("seakr", "2wiki"): 70.0} and got["Card B"]["per_call"] == {}
    tiny = paces.measured_paces("paper-tiny")
    assert list(tiny) == ["Card A"] and tiny["Card A"]["pace"] == {("seakr", "2wiki"): 9.0}


def test_a_decode_path_column_makes_each_path_a_pace_of_its_own(pace_path):
    lines = [",".join(paces.MEASURED_COLUMNS + (paces.CALLS_COLUMN, paces.PATH_COLUMN))]
    lines += [f"Card A,2026-01-01,aaaaaaa,2.11,float16,random,a test row,paper,seakr,2wiki,{s},made up,10,{p}"
              for s, p in ((30.0, "one_sync"), (20.0, "fused"), (40.0, ""))]
    pace_path.write_text("\n".join(lines) + "\n")
    got = paces.measured_paces()
    assert {k: v["per_call"] for k, v in got.items()} == {
        "Card A": {("seakr", "2wiki"): 4.0}, "Card A, fused": {("seakr", "2wiki"): 2.0},
        "Card A, one_sync": {("seakr", "2wiki"): 3.0}}


def test_a_pace_file_missing_or_without_its_columns_is_one_clear_error(pace_path, tmp_path):
    with pytest.raises(DataMissingError, match="measured GPU pace file is missing"):
        paces.measured_paces()
    (tmp_path / "bad.csv").write_text("card,method\nx,seakr\n")
    with pytest.raises(UserError, match="columns .* are missing"):
        paces.measured_paces(path=tmp_path / "bad.csv")
    with pytest.raises(UserError, match="columns .* are missing"):
        paces.cpu_paces("smoke", path=tmp_path / "bad.csv")


def test_the_committed_pace_files_give_every_row_they_hold():
    """Every (card, method, data set) of data/measured/gpu_pace.csv at a settings gives a positive
    pace (a reader that lost rows, or one returning nothing, fails here), and the CPU file gives
    every step of each profile it records."""
    committed = pd.read_csv(paces.MEASURED_PACE)
    for settings, rows in committed.groupby("settings"):
        got = paces.measured_paces(settings)
        held = {(c, m, d) for c, m, d in zip(rows["card"], rows["method"], rows["dataset"])}
        assert held == {(c, m, d) for c in got for (m, d) in got[c]["pace"]}
        assert all(s > 0 for c in got.values() for s in c["pace"].values())
    cpu = pd.read_csv(paces.CPU_PACE)
    for profile in set(cpu["profile"]):
        rec = paces.cpu_paces(profile)
        last = cpu[cpu["profile"] == profile]
        assert set(rec["steps"]) == set(last.loc[last["run"] == last["run"].iloc[-1], "step"])
        assert all(s["seconds"] > 0 for s in rec["steps"].values())


# ------------------------------------------------------------------------------ the command
@pytest.fixture
def canned(monkeypatch, tmp_path):
    """`cost` on a canned smoke dry run (the real one: tests/test_cost_against_run.py), at a CPU
    pace of its own: 1 s per computed call, 2 s for each step without calls."""
    from seakr_repro.price import command

    got = _canned()
    monkeypatch.setattr(command, "predict", lambda cfg, overrides, **kw: got)
    steps = {w["step"]: (100, paces.PER_CALL, 100) for w in got["work"]}
    steps.update({"00-prepare-data": (2, paces.PER_STEP, 0), "90-render": (2, paces.PER_STEP, 0)})
    path = tmp_path / "cpu_pace.csv"
    path.write_text(",".join(paces.CPU_COLUMNS) + "\n" + "".join(
        f"smoke,smoke test,abc1234,a test machine,{s},{sec},{unit},{calls},0,0,first record of this step,made up\n"
        for s, (sec, unit, calls) in steps.items()))
    monkeypatch.setattr(paces, "CPU_PACE", path)
    return got


def test_cost_prints_every_step_with_calls_what_it_covers_and_what_it_leaves_out(canned, capsys):
    main(["cost", "--profile", "smoke"])
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "every step with model calls (02-11)" in first and "Left out:" in first and "synthetic" in first
    assert "self_rag (selfrag-llama2-7b" in first             # no checkpoint here: skipped, said so
    for step in ("02-extract-hidden-states", "06-ablations", "10-seed-methods", "11-mechanisms"):
        assert f"| {step}" in out
    assert "00-prepare-data" in out                            # timed at the recorded CPU run
    assert "the call cache serves the other" in out and "[cost] pace: CPU: smoke test" in out
    assert "s per computed call (off: " in out and "derived rows" in out


def test_cost_json_gives_the_same_figures_per_notebook_and_in_all(canned, capsys):
    main(["cost", "--profile", "smoke", "--json"])
    got = json.loads(capsys.readouterr().out)
    nb = pd.DataFrame(got["notebooks"])
    assert got["total"]["calls"] == pytest.approx(nb["calls"].sum())
    assert got["total"]["unique"] == pytest.approx(nb["unique"].sum())
    assert got["total"]["calls_saved_by_sharing"] == pytest.approx(got["total"]["calls"] - got["total"]["unique"])
    units = pd.DataFrame(got["units"])
    assert {"step", "table", "run", "method", "dataset", "question_runs", "calls", "unique", "prompt_tokens",
            "generated_tokens", "pace"} <= set(units.columns)
    assert any(c.startswith("hours: CPU: ") for c in units.columns)
    (pace,) = got["total"]["hours"]
    assert pace.startswith("CPU: ") and got["total"]["hours"][pace]["hours"] > 0
    assert all(u["pace"] == "skipped here" for u in got["units"] if u["method"] == "self_rag")


def test_cost_divides_its_hours_over_ray_workers_and_says_it_is_arithmetic(canned, capsys):
    main(["cost", "--profile", "smoke", "--workers", "4"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("[cost] in all"))
    total = float(line.split(" hours (")[0].rsplit(" ", 1)[1])
    spread = float(line.split("over 4 Ray workers ")[1].split(" hours")[0])
    assert spread == pytest.approx(total / 4, abs=0.01) and "ARITHMETIC" in line.split("Ray workers")[1]


def test_status_shows_the_prediction_beside_the_run(canned, tmp_path, monkeypatch):
    from seakr_repro.commands import status
    from seakr_repro.price import command

    monkeypatch.setattr(command, "latest_prediction", lambda profile: canned)
    res = tmp_path / "smoke"
    (res / "stamps").mkdir(parents=True)
    (res / "stamps" / "04-complex-qa.json").write_text(json.dumps({"seconds": 33.0}))
    monkeypatch.setattr(command, "RESULTS_ROOT", tmp_path)
    text = status.predicted_beside_actual(load_config("smoke"))
    assert "predicted" in text and "| 04-complex-qa" in text and "33" in text
    monkeypatch.setattr(command, "latest_prediction", lambda profile: None)
    assert "cost --profile smoke" in status.predicted_beside_actual(load_config("smoke"))


def test_record_pace_keeps_a_finished_runs_work_and_how_far_the_last_pace_was_off(tmp_path, monkeypatch):
    """`cost --record-pace` appends one row per finished step, with its unit and how far the
    pace recorded before was off on this run's work, and the run's decisions, which a profile on
    the same model without a run of its own then decides at; a step whose files count no calls
    stops it (a pace needs both)."""
    res = tmp_path / "smoke"
    (res / "stamps").mkdir(parents=True)
    for step, secs in (("00-prepare-data", 6.0), ("04-complex-qa", 40.0)):
        (res / "stamps" / f"{step}.json").write_text(json.dumps({"seconds": secs}))
    _write(res / "data" / "bundled-2wiki.jsonl", [{"id": "q0"}])
    (res / "runs" / "bundled-2wiki").mkdir(parents=True)
    (res / "runs" / "bundled-2wiki" / "current.json").write_text(json.dumps({"cot": "cot-abc.jsonl"}))
    _write(res / "runs" / "bundled-2wiki" / "cot-abc.jsonl",
           [{"id": "q0", "llm_calls": 3, "llm_cache_hits": 1, "prompt_tokens": 9, "tokens": 2,
             "computed_prompt_tokens": 6, "computed_tokens": 2,
             "trace": [{"kind": "step", "output": "So the answer is X."},
                       {"kind": "pseudo_step", "output": "a b", "retrieve": False}]}])
    pace_file = tmp_path / "cpu_pace.csv"
    pace_file.write_text(",".join(paces.CPU_COLUMNS) + "\n")
    monkeypatch.setattr(paces, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(paces, "CPU_PACE", pace_file)
    monkeypatch.setattr(paces, "DECISIONS", tmp_path / "decisions.csv")
    paces.record_pace(load_config("smoke"), "a test", "a test machine", "abc1234")
    model = "smollm2-135m-instruct"
    got = paces.recorded_decisions(load_config("smoke"))
    assert list(got) == [model] and got[model]["source"].endswith("abc1234 " + time.strftime("%Y-%m-%d"))
    got = paces.recorded_decisions(load_config("default"))[model]
    assert got["answer_rate"] == 0.5 and got["source"].endswith(", profile smoke")
    assert paces.recorded_decisions(load_config("paper-tiny")) == {}          # another model
    rec = paces.cpu_paces("smoke")
    assert rec["steps"]["04-complex-qa"] == {"seconds": 40.0, "unit": "computed call", "units": 2.0, "fixed": 0.0,
                                             "per_unit": 20.0, "off": "first record of this step"}
    assert rec["steps"]["00-prepare-data"]["unit"] == "step" and rec["machine"] == "a test machine"
    (res / "stamps" / "04-complex-qa.json").write_text(json.dumps({"seconds": 50.0}))
    paces.record_pace(load_config("smoke"), "a test", "a test machine", "abc1234")
    assert paces.cpu_paces("smoke")["steps"]["04-complex-qa"]["off"].startswith("+25% against smoke abc1234")
    _write(res / "11-mechanisms" / "trials.jsonl", [{"id": "t1"}])          # a trial without its count
    (res / "stamps" / "11-mechanisms.json").write_text(json.dumps({"seconds": 5.0}))
    with pytest.raises(UserError, match="do not count the calls of 11-mechanisms"):
        paces.record_pace(load_config("smoke"), "a test", "a test machine", "abc1234")


def test_a_derived_row_is_counted_as_derived_not_as_calls(tmp_path):
    from seakr_repro.price.work import recorded_work

    cfg = load_config("smoke")
    _write(tmp_path / "data" / "bundled-2wiki.jsonl", [{"id": "q0"}])
    row = {"id": "q0", "llm_calls": 3, "llm_cache_hits": 3, "prompt_tokens": 9, "tokens": 2,
           "computed_prompt_tokens": 0, "computed_tokens": 0, "derived_from": {"file": "seakr-x.jsonl"}}
    _write(tmp_path / "runs" / "bundled-2wiki" / "seakr-abc.jsonl", [row])
    unit = recorded_work(cfg, tmp_path).set_index(["step", "run", "dataset"]).loc[
        ("04-complex-qa", "seakr", "bundled-2wiki")]
    assert (unit["questions"], unit["derived"], unit["llm_calls"], unit["llm_cache_hits"]) == (1, 1, 0, 0)


def test_the_synthetic_models_decisions_are_the_rates_a_runs_traces_record(tmp_path, monkeypatch):
    from seakr_repro.llm.synthetic import DECISIONS_ENV, SEED_ENV, SyntheticBackend
    from seakr_repro.price.work import decisions

    cfg = load_config("default")
    assert decisions(cfg, tmp_path) == {}
    steps = [{"kind": "pseudo_step", "output": "a b c d", "retrieve": True}, {"kind": "rerank", "output": "a b c"},
             {"kind": "pseudo_step", "output": "So the answer is X.", "retrieve": False},
             {"kind": "step", "output": "e f"}, {"kind": "final_knowledge", "output": "The answer is Y."},
             {"kind": "step", "output": "\nSo the answer is Y."}, {"kind": "step", "output": ""},
             {"kind": "pseudo_step", "output": "", "retrieve": True},       # empty: retrieves whatever U is
             {"kind": "direct", "output": "Y", "u": 1.0, "delta": 0.5}]     # simple QA: U passed delta
    rows = [{"id": "q0", "trace": steps}, {"id": "q1", "trace": steps, "derived_from": {}}]
    _write(tmp_path / "runs" / "2wiki" / "seakr-abc.jsonl", rows)
    _write(tmp_path / "runs" / "2wiki" / "estimator-energy-abc.jsonl", rows)       # shares SeaKR's steps
    _write(tmp_path / "runs" / "2wiki" / "gemma-3-270m-abc.jsonl", [{"id": "q0", "trace": steps[:2]}])
    (tmp_path / "runs" / "2wiki" / "current.json").write_text(json.dumps(
        {"seakr": "seakr-abc.jsonl", "estimator-energy": "estimator-energy-abc.jsonl",
         "gemma-3-270m": "gemma-3-270m-abc.jsonl"}))     # a backbone: its own model's
    got = decisions(cfg, tmp_path)
    assert got == {"smollm2-135m-instruct": {"retrieve_rate": 2 / 3, "answer_rate": 0.5, "words": 15 / 4,
                                             "newline_rate": 2 / 5},
                   "gemma-3-270m": {"retrieve_rate": 1.0, "answer_rate": 0.0, "words": 3.0, "newline_rate": 0.0}}
    monkeypatch.setenv(DECISIONS_ENV, json.dumps({"synthetic-llama-2-7b": {"retrieve_rate": 0.0, "answer_rate": 1.0}}))
    model = SyntheticBackend()      # an answer opens the generation: a step's ". " stop keeps it
    assert all(model.generate(f"q{i}", max_new_tokens=64, stop=[". "]).text.startswith("So the answer is ")
               for i in range(5))
    monkeypatch.setenv(DECISIONS_ENV, json.dumps({"synthetic-llama-2-7b": {"answer_rate": 0.5, "words": 9.0}}))
    said = [SyntheticBackend().generate(f"q{i}", max_new_tokens=64).text for i in range(400)]
    assert np.mean([len(t.split()) for t in said]) == pytest.approx(9.0, rel=0.1)   # answers and the rest
    monkeypatch.setenv(SEED_ENV, "1")             # cost's second draw: other outputs, the same rates
    again = [SyntheticBackend().generate(f"q{i}", max_new_tokens=64).text for i in range(400)]
    assert sum(a != b for a, b in zip(said, again)) > 300
    assert np.mean([len(t.split()) for t in again]) == pytest.approx(9.0, rel=0.1)
    tight = [model.sample(f"q{i}", Sampling(k=3, max_new_tokens=8)) for i in range(5)]     # no retrieval
    assert all(s.vectors.std(axis=0).max() < 0.01 for s in tight)
    monkeypatch.setenv(DECISIONS_ENV, json.dumps({"synthetic-llama-2-7b": {"newline_rate": 1.0}}))   # "\n" stops
    model = SyntheticBackend()
    assert all(model.generate(f"q{i}", max_new_tokens=64, stop=["\n"]).text == "" for i in range(5))
    assert all(model.generate(f"q{i}", max_new_tokens=64).text.startswith("\n") for i in range(5))


def test_the_first_line_names_the_rows_the_dry_run_could_not_answer():
    from seakr_repro.price.command import leaves_out

    units = _units(rows=[{}, {"run": "skr-knn", "method": "skr-knn", "calls": float("nan"), "question_runs": 7}])
    units["skipped here"] = ""
    (line,) = [x for x in leaves_out(units, {}) if "could not answer" in x]
    assert line.startswith("7 question-runs") and "skr-knn" in line and "seakr" not in line
