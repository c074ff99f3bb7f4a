"""The disk fills under a real `run`, on a real small file system (tmpfs; mounting one needs root,
so elsewhere these tests skip and say why), as a user meets it:

- `run --profile smoke --method seakr --dataset bundled-2wiki -n 3` with SEAKR_RESULTS_DIR on a
  400 KiB file system that another process fills after the first question: exit status 2, the
  one paragraph (the disk, the free space, the need, the command that resumes), whole questions
  left, `status` saying so; the printed command resumes, and gives a roomy run's answers;
- SEAKR_CACHE_DIR's call cache on a full file system (`--set uncertainty.k=5`: the calls are new):
  the run finishes, with one warning.

Minutes with the real smoke model: marked slow (`make test-all`)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seakr_repro.core.paths import PACKAGE_ROOT, REPO_ROOT

pytestmark = pytest.mark.slow

RUN = ["run", "--profile", "smoke", "--method", "seakr", "--dataset", "bundled-2wiki", "-n", "3"]
FILL = ("import errno\n"
        "with open({path!r}, 'wb', buffering=0) as fh:\n"
        "    try:\n"
        "        while True:\n"
        "            fh.write(b'x' * 4096)\n"
        "    except OSError as e:\n"
        "        assert e.errno == errno.ENOSPC, e\n")


@contextlib.contextmanager
def small_fs(path: Path, kib: int):
    """A tmpfs of `kib` KiB at `path` for the block; the test skips where none can be mounted."""
    path.mkdir(parents=True)
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command here to make a small real file system")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"a {kib} KiB tmpfs cannot be mounted here (mount needs root or CAP_SYS_ADMIN; "
                    f"uid {os.geteuid()}: {done.stderr.strip() or done.returncode}); the fake full "
                    "disk of test_disk_full.py covers every writer")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(path: Path) -> None:
    """Another process takes every byte left."""
    subprocess.run([sys.executable, "-c", FILL.format(path=str(path))], check=True, timeout=60)


def _env(**folders) -> dict:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "HF_HUB_OFFLINE": "1", **folders}
    env.pop("SEAKR_OVERRIDES", None)
    return env


def _cli(env, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", "seakr_repro", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), data[-120:]
    return [json.loads(line) for line in data.splitlines()]


def _answers(rows) -> list:
    return sorted((r["id"], r["answer"], r["em"], r["f1"]) for r in rows)


def _run_filled_after_the_first_question(env, fs: Path, runs: Path, log: Path, *extra):
    """`run` (RUN + extra) whose file system `fs` another process fills once the first question is
    in the run file (the run held still with SIGSTOP meanwhile, so however fast it goes the disk
    fills between its first and second question); its exit status and what it printed."""
    with open(log, "w+") as out:
        first = subprocess.Popen([sys.executable, "-m", "seakr_repro", *RUN, *extra, "--quiet"],
                                 cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 900
            while not (runs.is_dir() and any(p.read_bytes().count(b"\n") for p in runs.glob("seakr-*.jsonl"))):
                assert first.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "no question finished in 900 s"
                time.sleep(0.05)
            first.send_signal(signal.SIGSTOP)
            try:
                _fill(fs / "someone-elses-job.bin")
            finally:
                first.send_signal(signal.SIGCONT)
            code = first.wait(timeout=900)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        out.seek(0)
        return code, out.read()


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The runs' own call cache, corpus, index and converted model (built by the first run)."""
    return tmp_path_factory.mktemp("cache")


def test_results_disk_fills_after_the_first_question(tmp_path, cache):
    t0 = time.monotonic()
    with small_fs(tmp_path / "small", 400) as small:
        results = small / "results"
        env = _env(SEAKR_CACHE_DIR=str(cache), SEAKR_RESULTS_DIR=str(results))
        runs = results / "smoke" / "runs" / "bundled-2wiki"
        code, out = _run_filled_after_the_first_question(env, small, runs, tmp_path / "first.log")
        assert code == 2, out[-3000:]
        said = " ".join(out.split())
        run_file = next(runs.glob("seakr-*.jsonl"))
        assert "Traceback" not in out and "error: " in said, out[-3000:]
        said = said[said.index("error: "):]                 # after what the run printed before
        assert said.startswith("error: The disk is full: writing "), said
        assert f"writing {run_file} failed (No space left on device) on the file system mounted at {small}" in said
        assert "free of 400.0 KiB" in said
        # preflight's estimate, its parts that go to results/: more than this file system holds
        assert "The rest of the profile smoke's run needs up to " in said and "run files 321.0 KiB" in said
        assert f"The largest things this package keeps there: {results / 'smoke'}/" in said
        assert "someone-elses-job" not in said
        assert f"Fix: free space on {small} to go on for now; but the profile's run needs more than the " \
               f"400.0 KiB that file system holds in all, so move {results} to a disk with room and set " \
               "SEAKR_RESULTS_DIR to its new place; then resume with: " in said
        resume = said.split("then resume with: ", 1)[1].rstrip(".")
        assert resume.endswith(" ".join(RUN) + " --quiet") and f"SEAKR_RESULTS_DIR={results}" in resume
        kept = _lines(run_file)                            # whole questions only
        assert 1 <= len(kept) < 3
        status = _cli(env, "status", "--profile", "smoke").stdout
        stop = next(x for x in status.splitlines() if x.startswith("stopped: disk full at "))
        assert f"writing {run_file} on {small}" in stop and stop.endswith("resume with: " + resume)

        os.unlink(small / "someone-elses-job.bin")           # space freed
        bare = {k: v for k, v in env.items() if k != "SEAKR_RESULTS_DIR"}   # the command carries it
        again = subprocess.run(["bash", "-c", resume], env=bare, capture_output=True, text=True, timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        resumed = _lines(run_file)
        assert resumed[:len(kept)] == kept and len(resumed) == 3
        assert "stopped: disk full" not in _cli(env, "status", "--profile", "smoke").stdout

    roomy = _cli(_env(SEAKR_CACHE_DIR=str(cache), SEAKR_RESULTS_DIR=str(tmp_path / "roomy")), *RUN, "--quiet")
    assert roomy.returncode == 0, roomy.stderr[-3000:]
    roomy_rows = _lines(next((tmp_path / "roomy" / "smoke" / "runs" / "bundled-2wiki").glob("seakr-*.jsonl")))
    assert _answers(resumed) == _answers(roomy_rows)
    print(f"\n[disk full, run files] {time.monotonic() - t0:.0f} s")


def test_a_full_call_cache_disk_lets_the_run_finish_with_one_warning(tmp_path, cache):
    t0 = time.monotonic()
    if not (cache / "models").is_dir():                 # run alone: build what the run reads first
        built = _cli(_env(SEAKR_CACHE_DIR=str(cache), SEAKR_RESULTS_DIR=str(tmp_path / "warm")),
                     *RUN[:-2], "-n", "1", "--quiet")
        assert built.returncode == 0, built.stderr[-3000:]
    # 2 MiB: the free-space check before the run asks for the smoke profile's 1.2 MiB of call cache
    with small_fs(tmp_path / "cachefs", 2048) as fs:
        # a copy of the filled cache's call entries on the small file system; the corpus, index and
        # converted model (over 500 MB) stay where they are, through links
        here = fs / "cache"
        here.mkdir()
        shutil.copytree(cache / "llm", here / "llm")
        for part in ("corpus", "indexes", "models"):
            (here / part).symlink_to(cache / part)
        before = {p.relative_to(here) for p in (here / "llm").rglob("*.npz")}
        results = tmp_path / "results"
        env = _env(SEAKR_CACHE_DIR=str(here), SEAKR_RESULTS_DIR=str(results))
        runs = results / "smoke" / "runs" / "bundled-2wiki"
        # k = 5: calls the cache has not seen
        code, out = _run_filled_after_the_first_question(env, fs, runs, tmp_path / "run.log",
                                                          "--set", "uncertainty.k=5")
        assert code == 0, out[-3000:]
        said = " ".join(out.split())
        assert said.count("warning:") == 1 and "Traceback" not in out and "error:" not in out, out[-3000:]
        said = said[said.index("warning:"):]
        assert said.startswith("warning: the LLM call cache cannot store new calls: the disk holding it is "
                               f"full. It lives in {here / 'llm' / 'smollm2-135m-instruct'} (")
        assert f"on the file system mounted at {fs} (" in said and "set cache.must_keep: true" in said
        assert list((here / "llm").rglob(".*tmp")) == []      # no partial entry left
        assert {p.relative_to(here) for p in (here / "llm").rglob("*.npz")} > before   # the first question's
    rows = _lines(next(runs.glob("seakr-*.jsonl")))
    assert len(rows) == 3
    print(f"\n[disk full, call cache] {time.monotonic() - t0:.0f} s")
