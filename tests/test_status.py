"""`python -m seakr_repro status` on a fabricated results directory: partial and torn run files,
steps in every state, totals capped by a notebook's N_QUESTIONS."""
import json
import os
import re
import socket
import time

import pytest

from seakr_repro.core import runlock

from seakr_repro.runs import plan
from seakr_repro.commands import status
from seakr_repro.core.config import load_config


def _row(i, correct, seconds=2.0):
    return {"id": f"q{i}", "answer": "Paris" if correct else "Rome", "golds": ["Paris"],
            "em": float(correct), "f1": float(correct), "n_retrievals": 1, "llm_calls": 1,
            "tokens": 5, "seconds": seconds}


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(status, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(plan, "RESULTS_ROOT", tmp_path)
    res = tmp_path / "default"
    (res / "data").mkdir(parents=True)
    (res / "data" / "bundled-2wiki.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "question": "?", "answers": ["Paris"]}) + "\n" for i in range(10)))
    runs = res / "runs" / "bundled-2wiki"
    runs.mkdir(parents=True)
    rows = [_row(i, i % 2 == 0) for i in range(4)]
    (runs / "seakr-abc123.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"id": "q4", "answ')   # torn: being written
    (runs / "cot-def456.jsonl").write_text(json.dumps(_row(0, True)) + "\n{broken\n" +
                                           json.dumps(_row(1, True)) + "\n")
    (runs / "estimator-prompt-0a1b2c.jsonl").write_text(json.dumps(_row(0, True)) + "\n")
    (res / "stamps").mkdir()
    (res / "stamps" / "00-prepare-data.json").write_text(
        json.dumps({"stamp": "x", "seconds": 3725.0, "finished": "2026-01-01T00:00:00"}))
    nbs = res / "notebooks"
    nbs.mkdir()
    (nbs / ".01-build-bm25-index.running.ipynb").write_text("{}")
    (nbs / "02-extract-hidden-states.failed.ipynb").write_text("{}")
    return res


def _files(cfg, dataset="bundled-2wiki"):
    """The run-status rows of the fixture's files (not the planned runs without one)."""
    runs = status.run_status(cfg)
    return runs[(runs.dataset == dataset) & (runs.config != "missing")].set_index("run")


def test_runs_done_total_scores_pace_eta(results):
    runs = _files(load_config("default"))
    seakr = runs.loc["seakr"]
    assert (seakr["done"], seakr["total"]) == (4, 10)          # the torn line is not counted
    assert seakr["em"].startswith("50.0 [") and seakr["f1"].startswith("50.0 [")
    assert seakr["s/question"] == "2.00" and seakr["eta"] == "12s"   # 6 left x 2 s
    assert runs.loc["cot", "em"] == "unreadable: line 2"
    # an ablation's total is capped by analysis.n_questions (3 in the default profile)
    assert (runs.loc["estimator-prompt", "done"], runs.loc["estimator-prompt", "total"]) == (1, 3)
    assert runs.loc["estimator-prompt", "eta"] == "4s"
    assert status.run_total(load_config("smoke"), "bundled-2wiki", "seakr") is None   # not prepared
    (results.parent / "smoke" / "data").mkdir(parents=True)
    (results.parent / "smoke" / "data" / "bundled-2wiki.jsonl").write_bytes(
        (results / "data" / "bundled-2wiki.jsonl").read_bytes())
    assert status.run_total(load_config("smoke"), "bundled-2wiki", "seakr") == 1   # 04's cap
    # status only reads: the torn line is still there for the runner to repair
    assert (results / "runs" / "bundled-2wiki" / "seakr-abc123.jsonl").read_text().endswith('"answ')


def test_steps_in_every_state(results):
    with runlock.hold(results / runlock.LOCK_NAME, "make reproduce"):      # a live run
        steps = status.step_status(load_config("default")).set_index("step")
    assert steps.loc["00-prepare-data", "state"].startswith("stale: its stamp is from an older reproduce")
    assert steps.loc["00-prepare-data", "took"] == "1h 02m"
    assert steps.loc["01-build-bm25-index", "state"] == "running"
    assert steps.loc["02-extract-hidden-states", "state"] == "failed"
    assert steps.loc["90-render", "state"] == "not run"
    # the same temporary notebook with no live run: stopped, not running forever
    steps = status.step_status(load_config("default")).set_index("step")
    assert steps.loc["01-build-bm25-index", "state"] == "stopped"


def test_report_and_cli(results, capsys):
    from seakr_repro.cli import main
    with runlock.hold(results / runlock.LOCK_NAME, "python -m seakr_repro reproduce --profile default"):
        assert main(["status", "--profile", "default"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| bundled-2wiki +\| seakr ", out) and "disk: results/default" in out
    assert f"reproduce: running, pid {os.getpid()} on host {socket.gethostname()}" in out
    assert re.search(r"\| 01-build-bm25-index +\| running", out)


def _dead_holder(results, host=None, age=0.0):
    """The lock file a run killed with -9 leaves: its record, no flock held."""
    lock = results / runlock.LOCK_NAME
    lock.write_text(json.dumps({"pid": 999999, "host": host or socket.gethostname(),
                                "started": "2026-01-01 10:00:00", "cwd": "/repo",
                                "command": "python -m seakr_repro reproduce --profile default"}))
    os.utime(lock, (time.time() - age, time.time() - age))
    return lock


def test_a_run_that_is_gone_is_stopped_with_the_resume_command(results):
    _dead_holder(results, age=7200)
    saved = time.time() - 3600                                      # papermill's last save
    os.utime(results / "notebooks" / ".01-build-bm25-index.running.ipynb", (saved, saved))
    text = status.report(load_config("default"))
    stopped_at = time.strftime("%Y-%m-%d %H:%M", time.localtime(saved))
    assert f"reproduce: stopped at {stopped_at}" in text and "in step 01-build-bm25-index" in text
    assert "pid 999999" in text and "its process is gone" in text
    assert text.splitlines()[1].endswith(
        "resume with: cd /repo && python -m seakr_repro reproduce --profile default")
    assert re.search(r"\| 01-build-bm25-index +\| stopped", text) and "| running" not in text


def test_a_run_on_another_host_is_alive_while_its_heartbeat_is_fresh(results):
    _dead_holder(results, host="elsewhere")
    assert status.run_holder(load_config("default"))["alive"]
    assert "reproduce: running, pid 999999 on host elsewhere" in status.report(load_config("default"))
    _dead_holder(results, host="elsewhere", age=2 * runlock.STALE_S)
    assert not status.run_holder(load_config("default"))["alive"]
    assert "reproduce: stopped at" in status.report(load_config("default"))


def test_no_lock_at_all_still_says_stopped_and_how_to_resume(results):
    text = status.report(load_config("default"))
    assert "reproduce: stopped at" in text and "reproduce --profile default" in text


def test_run_files_of_older_configurations_are_labelled(results):
    from seakr_repro.runs.runner import mark_current
    runs = results / "runs" / "bundled-2wiki"
    (runs / "seakr-old999.jsonl").write_text("".join(json.dumps(_row(i, True)) + "\n" for i in range(6)))
    table = status.run_status(load_config("default"))
    table = table[table.file.str.startswith("runs/bundled-2wiki/")]
    assert set(table[table.run == "seakr"].config) == {""}         # nothing recorded: not guessed
    assert len(table[table.run == "seakr"]) == 2                   # both files, no "missing" row
    mark_current(runs / "seakr-abc123.jsonl")
    table = status.run_status(load_config("default")).set_index("file")
    cur, old = table.loc["runs/bundled-2wiki/seakr-abc123.jsonl"], table.loc["runs/bundled-2wiki/seakr-old999.jsonl"]
    assert (cur["config"], cur["done"], cur["total"]) == ("current", 4, 10)
    assert (old["config"], old["done"], old["eta"]) == ("older", 6, "-") and old["total"] == "-"
    assert table.loc["runs/bundled-2wiki/cot-def456.jsonl", "config"] == ""   # another label


def test_no_results_yet(tmp_path, monkeypatch):
    monkeypatch.setattr(status, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(plan, "RESULTS_ROOT", tmp_path)
    text = status.report(load_config("smoke"))
    assert not (tmp_path / "smoke").exists()      # creates nothing
    # every planned run is listed, none run yet (no set prepared: no total yet)
    runs = status.run_status(load_config("smoke"))
    assert len(runs) == len({(r.folder, r.label) for r in plan.planned_runs(load_config("smoke"))})
    assert set(runs.config) == {"missing"} and set(runs.done) == {0}
    assert "missing = no file" in text


def test_a_row_its_step_skipped_says_so(results):
    (results / "04-complex-qa").mkdir()
    (results / "04-complex-qa" / "skipped.json").write_text(json.dumps({"self_rag": "no checkpoint"}))
    runs = status.run_status(load_config("default"))
    runs = runs[runs.dataset == "bundled-2wiki"]          # Table 1's (05 runs Self-RAG on others)
    assert set(runs[runs.run == "self_rag"].config) == {"skipped"}
    assert set(runs[runs.run == "flare"].config) == {"missing"}


def test_a_step_is_stale_when_what_it_reads_changed(results):
    """After `reproduce --only 03` wrote other thresholds, step 04 (which reads them) is stale;
    a step 03 ran again with the same thresholds would leave it done."""
    from seakr_repro import pipeline
    cfg = load_config("default")
    for marker in (results / "notebooks").iterdir():      # the fixture's running and failed steps
        marker.unlink()
    done = []

    def fake(nb, planned, delta=-6.0):
        done.append(nb.stem)
        (results / "notebooks" / nb.name).write_text("{}")    # the executed copy reproduce leaves
        if nb.stem.startswith("03"):
            (results / "calibration").mkdir(exist_ok=True)
            (results / "calibration" / "delta.json").write_text(json.dumps({"eigen": delta}))
        return 1.0
    pipeline.plan("default", execute=fake, results=results)
    steps = status.step_status(cfg).set_index("step")["state"]
    assert (steps == "done").all(), steps
    pipeline.plan("default", execute=fake, results=results, only=["03"], force=True)
    assert (status.step_status(cfg).set_index("step")["state"] == "done").all()
    pipeline.plan("default", execute=lambda nb, p: fake(nb, p, -5.0), results=results, only=["03"], force=True)
    steps = status.step_status(cfg).set_index("step")["state"]
    assert steps["04-complex-qa"] == "stale: what it reads changed: 03-uncertainty-estimators's calibration"
    assert steps["02-extract-hidden-states"] == "done" and steps["01-build-bm25-index"] == "done"


def test_a_runs_total_is_the_one_the_last_reproduce_asked_for(results):
    """`reproduce --set notebooks.04-complex-qa.N_QUESTIONS=2` (or --param 04:N_QUESTIONS=2): status
    counts 2 questions to do, not the profile's whole prepared set."""
    from seakr_repro.core.io import write_json
    from seakr_repro.pipeline import LAST_RUN

    assert _files(load_config("default")).loc["seakr", "total"] == 10
    write_json(results / LAST_RUN, {"overrides": {}, "parameters": {"04-complex-qa": {"N_QUESTIONS": 2}}})
    seakr = _files(load_config("default")).loc["seakr"]
    assert (seakr["done"], seakr["total"], seakr["eta"]) == (4, 2, "done")


def test_derived_rows_have_a_column_of_their_own_and_leave_the_pace_alone(results):
    """Two rows computed at 2 s and two written from another run's file at 0 s: the pace is the
    computed rows' 2 s, so the 6 questions left take 12 s (not 6 s at a pace of 1 s)."""
    rows = [_row(i, True) for i in range(2)] + [{**_row(i, True, 0.0), "derived_from": {"file": "x"}}
                                                for i in (2, 3)]
    (results / "runs" / "bundled-2wiki" / "seakr-abc123.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    seakr = _files(load_config("default")).loc["seakr"]
    assert (seakr["done"], seakr["derived"], seakr["s/question"], seakr["eta"]) == (4, 2, "2.00", "12s")
