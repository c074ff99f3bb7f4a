"""A crash in the middle of a notebook, as a user meets it, on two runs: a shrunken smoke profile
(slow tier), and the paper profile at test size (`paper-tiny` on the stand-ins of tests/paper_shaped.py: the
faithful methods over the es_best_fields index, Self-RAG on its own checkpoint).

`reproduce` runs in its own process group; once notebook 04 has finished a question, the run and
its kernel (which jupyter starts in a session of its own) are frozen with SIGSTOP, so that the
checks below see the run mid-notebook however fast the machine is: a second `reproduce` of the
profile is refused naming it and `status` says running. Then every one of its processes is killed
with SIGKILL (a crash, a power cut: no clean-up runs). `status` must then say stopped, with the
command that resumes, and that command, run as printed (it carries the SEAKR_* folders itself),
must finish the run with every question once: nothing lost, nothing run twice, the rows finished
before the crash kept as they were."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paper_shaped import build_raw, overrides, run_env
from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.core.resume import PATH_ENV

pytestmark = pytest.mark.notebooks

N = 2            # questions per run file
ONLY = ["--only", "00", "--only", "01", "--only", "04"]


def _smoke(tmp_path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SEAKR_RESULTS_DIR": str(tmp_path / "results"),
           "SEAKR_FIGURES_DIR": str(tmp_path / "figures"), "SEAKR_TABLES_DIR": str(tmp_path / "tables"),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("SEAKR_OVERRIDES", None)
    sets = ["--set", "datasets.complex=[bundled-2wiki]", "--set", "datasets.simple=[bundled-single]",
            "--set", f"notebooks.04-complex-qa.N_QUESTIONS={N}"]
    return {"profile": "smoke", "env": env, "sets": sets,
            "files": {("bundled-2wiki", m) for m in ("seakr", "cot", "ircot", "flare", "dragin")},
            # how the resume command spells the --set values it was given
            "resume_sets": ["datasets.complex=[\"bundled-2wiki\"]", "datasets.simple=[\"bundled-single\"]",
                            f"notebooks.04-complex-qa.N_QUESTIONS={N}"]}


def _paper_tiny(tmp_path: Path) -> dict:
    made = build_raw(tmp_path)                     # a few seconds: the stand-ins of the paper-shaped run
    sets = overrides(made)
    methods = ("seakr", "cot", "ircot", "flare", "dragin", "self_rag")
    return {"profile": "paper-tiny", "env": run_env(tmp_path), "sets": sets,
            "files": {(d, m) for d in ("2wiki", "hotpotqa", "iirc") for m in methods},
            "resume_sets": sets[1::2]}


def _cli(env, *args, **kw):
    return subprocess.run([sys.executable, "-m", "seakr_repro", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300, **kw)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()
            if line.strip() and line.endswith("}")]


def _family(pid: int) -> list[int]:
    """pid and every process under it (from /proc): reproduce, its papermill kernel and theirs."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue              # gone while we looked
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    family = [pid]
    for p in family:
        family += [c for c, parent in parents.items() if parent == p]
    return family


def _gone(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# the smoke case checks the same stop and resume on the default profile's paths (slow tier); the
# paper-tiny case runs in `make test-heavy`, CI's second step: `make test` stays under 30 minutes
@pytest.mark.parametrize("case", [pytest.param(_smoke, marks=pytest.mark.slow),
                                  pytest.param(_paper_tiny, marks=pytest.mark.heavy)],
                         ids=["smoke", "paper-tiny"])
def test_kill_9_mid_notebook_then_status_refusal_and_resume(tmp_path, case):
    case = case(tmp_path)
    profile, env = case["profile"], case["env"]
    args = ["--profile", profile, *case["sets"], *ONLY]
    runs = tmp_path / "results" / profile / "runs"
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, "-m", "seakr_repro", "reproduce", "--no-preflight", *args],
                             cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    family = [first.pid]
    try:
        # wait until notebook 04 has finished at least one question of the first run (SeaKR)
        deadline = time.time() + 300
        while not (runs.is_dir() and any(_rows(p) for p in runs.glob("*/*.jsonl"))):
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.time() < deadline, "notebook 04 wrote no question in 300 s"
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGSTOP)          # reproduce first: it starts nothing new
        family = _family(first.pid)
        assert len(family) > 1, "no kernel under the reproduce process"
        for pid in family[1:]:
            os.kill(pid, signal.SIGSTOP)              # the kernel, in a session of its own

        second = _cli(env, "reproduce", "--no-preflight", *args)
        assert second.returncode == 2
        refusal = " ".join(second.stderr.split())             # the paragraph, unwrapped
        assert f"another reproduce of this profile is running (pid {first.pid} on host" in refusal
        holder = json.loads((tmp_path / "results" / profile / "reproduce.lock").read_text())
        assert f": {holder['command']})" in refusal, refusal     # its whole command, unbroken
        assert f"reproduce --profile {profile}" in holder["command"]
        live = _cli(env, "status", "--profile", profile).stdout
        assert f"reproduce: running, pid {first.pid}" in live
        assert re.search(r"\| 04-complex-qa +\| running", live), live

        before = {p.relative_to(runs): p.read_bytes() for p in runs.glob("*/*.jsonl")}
    finally:
        for pid in family:                            # every process of the run, at once
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        first.wait(timeout=30)
        log.close()
    deadline = time.time() + 30
    while not all(_gone(pid) for pid in family):
        assert time.time() < deadline, "a process of the killed run is still there"
        time.sleep(0.1)

    after_crash = _cli(env, "status", "--profile", profile).stdout
    assert "reproduce: running" not in after_crash
    assert re.search(r"\| 04-complex-qa +\| stopped", after_crash), after_crash
    line = next(x for x in after_crash.splitlines() if x.startswith("reproduce: stopped at "))
    assert "in step 04-complex-qa" in line and f"pid {first.pid}" in line and "its process is gone" in line
    resume = line.split("resume with: ", 1)[1]
    # cd <where it ran> && SEAKR_*=<its folders> python -m seakr_repro reproduce <what it was given>
    cd, command = resume.split(" && ", 1)
    assert shlex.split(cd) == ["cd", str(REPO_ROOT)]
    words = shlex.split(command)
    folders = [w for w in words if re.match(r"SEAKR_\w+=", w)]
    assert folders == [f"{k}={env[k]}" for k in PATH_ENV if env.get(k)], folders
    assert words[len(folders) + 1:] == ["-m", "seakr_repro", "reproduce", "--profile", profile,
                                        *[w for s in case["resume_sets"] for w in ("--set", s)],
                                        *ONLY, "--no-preflight"], words

    # as printed, in a shell without the SEAKR_* folders: the command carries them itself
    bare = {k: v for k, v in env.items() if k not in PATH_ENV}
    done = subprocess.run(["bash", "-c", resume], env=bare, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "taking over the lock of an earlier run whose process is gone" in done.stderr
    final = _cli(env, "status", "--profile", profile).stdout
    # done; the step graph adds that 04 reads 03's threshold, which this --only run never computed:
    # 04 runs again only if 03's calibration, once computed, differs from what 04 read (issue 33)
    assert "reproduce: not running" in final and re.search(
        r"\| 04-complex-qa +\| done; may run, if 03-uncertainty-estimators's calibration changes", final), final

    files = sorted(runs.glob("*/*.jsonl"))
    assert {(p.parent.name, p.stem.rsplit("-", 1)[0]) for p in files} == case["files"]
    for path in files:
        ids = [r["id"] for r in _rows(path)]
        assert len(ids) == len(set(ids)) == N, (path.name, ids)       # every question, once
        kept = before.get(path.relative_to(runs), b"")
        kept = kept[:kept.rfind(b"\n") + 1]                        # a torn last line is redone
        assert path.read_bytes().startswith(kept), path.name        # finished rows are kept as they were
