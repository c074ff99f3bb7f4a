"""One `reproduce` per profile: the lock is refused while its holder lives (naming it), taken over
when the holder's process is gone, and exactly one of many processes racing for it wins."""
import io
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from seakr_repro.core import runlock
from seakr_repro.core.errors import UserError


def test_a_live_holder_refuses_a_second_run_and_is_named(tmp_path):
    lock = tmp_path / "reproduce.lock"
    with runlock.hold(lock, "python -m seakr_repro reproduce --profile smoke"):
        with pytest.raises(UserError) as err:
            with runlock.hold(lock, "second"):
                pass
        assert runlock.holder(lock)["alive"]
    msg = str(err.value)
    assert "another reproduce of this profile is running" in msg
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in msg
    assert "reproduce --profile smoke" in msg and f"kill {os.getpid()}" in msg
    assert lock.exists() and runlock.holder(lock) is None     # released: emptied, never deleted


def test_a_holder_whose_process_is_gone_is_taken_over_with_a_notice(tmp_path):
    lock = tmp_path / "reproduce.lock"
    lock.write_text(json.dumps({"pid": 999999, "host": socket.gethostname(), "started": "then",
                                "command": "old command"}))   # what kill -9 leaves: no flock
    assert runlock.holder(lock)["alive"] is False
    notice = io.StringIO()
    with runlock.hold(lock, "new command", notice=notice) as info:
        assert json.loads(lock.read_text())["command"] == "new command" == info["command"]
    assert "taking over the lock of an earlier run whose process is gone" in notice.getvalue()
    assert "pid 999999" in notice.getvalue() and "old command" in notice.getvalue()


def test_another_hosts_run_with_a_fresh_heartbeat_is_not_taken_over(tmp_path):
    lock = tmp_path / "reproduce.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "command": "c"}))
    with pytest.raises(UserError, match="on another host may be running"):
        with runlock.hold(lock, "mine"):
            pass
    old = time.time() - 2 * runlock.STALE_S
    os.utime(lock, (old, old))
    with runlock.hold(lock, "mine", notice=io.StringIO()):
        pass


def test_the_heartbeat_touches_the_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(runlock, "HEARTBEAT_S", 0.05)
    lock = tmp_path / "reproduce.lock"
    with runlock.hold(lock, "c"):
        old = time.time() - 1000
        os.utime(lock, (old, old))
        time.sleep(0.3)
        assert time.time() - lock.stat().st_mtime < 10


RACER = """
import sys, time
from seakr_repro.core import runlock
from seakr_repro.core.errors import UserError
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))     # all start at once
try:
    with runlock.hold(sys.argv[1], "racer"):
        print("got", flush=True)
        time.sleep(1.5)
except UserError:
    print("refused", flush=True)
"""


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale-holder"])
def test_exactly_one_of_racing_processes_gets_the_lock(tmp_path, stale):
    lock = tmp_path / "reproduce.lock"
    if stale:
        lock.write_text(json.dumps({"pid": 999999, "host": socket.gethostname(), "command": "gone"}))
    start = str(time.time() + 2.0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(lock), start], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert sorted(o[0] for o in outs) == ["got", "refused", "refused", "refused"]
