"""Tests leave the checkout alone (issue 40.9): results go to the session's temporary folder, and a
change under the checkout's results/ is found and named (conftest.py fails the session on it)."""
import os
import time
from pathlib import Path

from checkout_guard import CHECKOUT_RESULTS, changes, listing

from seakr_repro.core import paths


def test_the_session_writes_results_under_a_temporary_folder():
    root = Path(paths.RESULTS_ROOT).resolve()
    assert root == Path(os.environ["SEAKR_RESULTS_DIR"]).resolve()
    assert not root.is_relative_to(paths.REPO_ROOT.resolve()) and root != CHECKOUT_RESULTS.resolve()
    assert paths.results_dir("smoke").is_relative_to(root)


def test_a_changed_results_folder_is_named(tmp_path):
    (tmp_path / "paper").mkdir()
    (tmp_path / "paper" / "last-reproduce.json").write_text("{}")
    (tmp_path / "last-profile").write_text("default\n")
    before = listing(tmp_path)
    assert changes(before, listing(tmp_path)) == []
    (tmp_path / "smoke").mkdir()
    (tmp_path / "paper" / "reproduce.lock").write_text("")
    (tmp_path / "paper" / "last-reproduce.json").write_text('{"overrides": {}}')
    (tmp_path / "last-profile").unlink()
    time.sleep(0.01)
    assert changes(before, listing(tmp_path)) == [
        "added paper/reproduce.lock", "added smoke", "removed last-profile", "changed paper/last-reproduce.json"]


def test_a_live_reproduce_run_is_told_from_the_tests(tmp_path):
    """A user's real run writes to results/ while `make test` runs beside it: the guard names that
    run (and so does not blame the tests); a lock whose holder is gone names nobody."""
    from checkout_guard import live_runs

    from seakr_repro.core import runlock

    (tmp_path / "default").mkdir()
    lock = tmp_path / "default" / runlock.LOCK_NAME
    assert live_runs(tmp_path) == []
    with runlock.hold(lock, "make reproduce PROFILE=default"):
        got = live_runs(tmp_path)
        assert len(got) == 1 and got[0].startswith("default: pid ") and "make reproduce" in got[0]
    assert live_runs(tmp_path) == []
