"""A crash in the middle of a notebook, as a user meets it: `reproduce` of a shrunken smoke profile
runs in its own process group; while it is in notebook 04, a second `reproduce` of the profile is
refused naming it and `status` says running; then the whole group is killed with SIGKILL (a crash,
a power cut: no clean-up runs). `status` must then say stopped, with the command that resumes, and
that command must finish the run with every question once: nothing lost, nothing run twice."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seakr_repro.core.paths import REPO_ROOT

pytestmark = pytest.mark.notebooks

N = 2            # questions per run file
ARGS = ["--profile", "smoke", "--only", "00", "--only", "01", "--only", "04",
        "--set", "datasets.complex=[bundled-2wiki]", "--set", "datasets.simple=[bundled-single]",
        "--set", f"notebooks.04-complex-qa.N_QUESTIONS={N}"]


def _cli(env, *args, **kw):
    return subprocess.run([sys.executable, "-m", "seakr_repro", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, **kw)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()
            if line.strip() and line.endswith("}")]


def test_kill_9_mid_notebook_then_status_refusal_and_resume(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SEAKR_RESULTS_DIR": str(tmp_path / "results"),
           "SEAKR_FIGURES_DIR": str(tmp_path / "figures"), "SEAKR_TABLES_DIR": str(tmp_path / "tables"),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("SEAKR_OVERRIDES", None)
    res = tmp_path / "results" / "smoke"
    runs = res / "runs" / "bundled-2wiki"
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, "-m", "seakr_repro", "reproduce", "--no-preflight", *ARGS],
                             cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        # wait until notebook 04 has finished at least one question of the first run (SeaKR)
        deadline = time.time() + 300
        while not (runs.is_dir() and any(_rows(p) for p in runs.glob("*.jsonl"))):
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.time() < deadline, "notebook 04 wrote no question in 300 s"
            time.sleep(0.5)

        second = _cli(env, "reproduce", "--no-preflight", *ARGS)
        assert second.returncode == 2
        assert f"another reproduce of this profile is running (pid {first.pid} on host" in second.stderr
        assert "reproduce --profile smoke" in second.stderr
        live = _cli(env, "status", "--profile", "smoke").stdout
        assert f"reproduce: running, pid {first.pid}" in live
        assert re.search(r"\| 04-complex-qa +\| running", live)

        before = {p.name: p.read_bytes() for p in runs.glob("*.jsonl")}
        os.killpg(first.pid, signal.SIGKILL)          # the reproduce process and its kernel
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        log.close()

    after_crash = _cli(env, "status", "--profile", "smoke").stdout
    assert "reproduce: running" not in after_crash
    assert re.search(r"\| 04-complex-qa +\| stopped", after_crash)
    line = next(x for x in after_crash.splitlines() if x.startswith("reproduce: stopped at "))
    assert "in step 04-complex-qa" in line and f"pid {first.pid}" in line and "its process is gone" in line
    resume = line.split("resume with: ", 1)[1]
    assert "-m seakr_repro reproduce --profile smoke --set 'datasets.complex=[\"bundled-2wiki\"]'" in resume
    assert resume.endswith(f"N_QUESTIONS={N} --only 00 --only 01 --only 04 --no-preflight")

    done = subprocess.run(["bash", "-c", resume], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "taking over the lock of an earlier run whose process is gone" in done.stderr
    final = _cli(env, "status", "--profile", "smoke").stdout
    # done; the step graph adds that 04 reads 03's threshold, which this --only run never computed
    assert "reproduce: not running" in final and re.search(
        r"\| 04-complex-qa +\| stale: a step it reads ran again or will: 03-uncertainty-estimators", final), final

    files = sorted(runs.glob("*.jsonl"))
    assert {p.stem.rsplit("-", 1)[0] for p in files} == {"seakr", "cot", "ircot", "flare", "dragin"}
    for path in files:
        ids = [r["id"] for r in _rows(path)]
        assert len(ids) == len(set(ids)) == N, (path.name, ids)       # every question, once
        kept = before.get(path.name, b"")
        kept = kept[:kept.rfind(b"\n") + 1]                        # a torn last line is redone
        assert path.read_bytes().startswith(kept), path.name        # finished rows are kept as they were
