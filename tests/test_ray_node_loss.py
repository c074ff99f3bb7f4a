"""A Ray node lost mid-run, on local clusters: `python -m seakr_repro run` on the Ray engine (the
synthetic backend, each model call held a moment by tests/slowed_run.py so that questions are in
flight), then a node taken away.

- The node the driver runs on (its runtime-env agent killed: the raylet fate-shares with it, as in
  the issue's report; in the slow tier also the raylet itself, and the head's GCS server): one
  paragraph within 90 s of the kill naming what died in Ray's words, exit status 2, whole rows
  kept, `status` names the stop, and the command the paragraph gives resumes to the rows of an
  uninterrupted run.
- A two-node cluster (`ray.cluster_utils.Cluster`, slow tier: two nodes take a while to start)
  losing its worker node to SIGKILL, as a host that is gone: the run goes on with
  the other worker, says once that the cluster shrank (within 90 s of the removal) and ends with
  every question once, the rows of an uninterrupted run.
"""
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
N = 8                                    # questions: several in flight on each worker at the kill
MESSAGE_SECONDS = 90                     # the bound, from the loss to the message
RUN = ["run", "--profile", "smoke", "--method", "seakr", "--dataset", "bundled-2wiki", "-n", str(N),
       "--set", f"datasets.n_questions={N}", "--set", "cache.enabled=false",
       "--set", "model.backend=synthetic"]
RAY = ["--set", "runner.engine=ray", "--set", "runner.workers=2"]


def _env(results: Path, **more) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEAKR_")}
    return {**env, "SEAKR_RESULTS_DIR": str(results), "PYTHONPATH": str(ROOT), **more}


def _rows(results: Path) -> dict:
    """{id: row without its wall time} of the run's file, asserting each id once and whole lines."""
    (path,) = (results / "smoke" / "runs" / "bundled-2wiki").glob("seakr-*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == len({r["id"] for r in rows}), "a question written twice"
    return {r["id"]: {k: v for k, v in r.items() if k != "seconds"} for r in rows}


def _error_paragraph(stderr: str) -> str:
    """The paragraph the command line printed ("error: " and its indented lines), on one line."""
    first, *rest = stderr.split("\nerror: ", 1)[1].splitlines()
    body = [first, *itertools.takewhile(lambda line: line.startswith("  "), rest)]
    return " ".join(" ".join(body).split())


def _count(results: Path) -> int:
    files = list((results / "smoke" / "runs" / "bundled-2wiki").glob("seakr-*.jsonl"))
    return sum(1 for _ in files[0].open()) if files else 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The rows of the same run on the local engine, start to end."""
    results = tmp_path_factory.mktemp("local")
    subprocess.run([sys.executable, "-m", "seakr_repro", *RUN], cwd=ROOT, env=_env(results), check=True,
                   capture_output=True, timeout=600)
    return _rows(results)


class Watched:
    """A slowed `run` in a subprocess, its stderr read as it comes with the time of each piece."""

    def __init__(self, args, env):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "slowed_run.py"), *args], cwd=ROOT, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.pieces: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.pieces.append((time.monotonic(), line))

    def wait_for(self, what, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert self.proc.poll() is None, f"the run ended early:\n{self.stderr()}"
            assert time.monotonic() < deadline, f"timed out waiting:\n{self.stderr()}"
            time.sleep(0.2)

    def finish(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the run still waits {timeout:.0f} s on:\n{self.stderr()}") from None
        self._reader.join(10)
        return rc

    def first(self, text: str) -> float | None:
        return next((t for t, line in self.pieces if text in line), None)

    def stderr(self) -> str:
        return "".join(line for _, line in self.pieces)

    def stop(self) -> None:
        """The driver and what it started (a local cluster), each by its id."""
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        for p in [psutil.Process(self.proc.pid)] + family if self.proc.poll() is None else family:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def _raylet(driver_pid: int) -> psutil.Process:
    """The raylet of the local cluster the driver started."""
    return next(p for p in psutil.Process(driver_pid).children() if p.name() == "raylet")


def _runtime_env_agent(driver_pid: int) -> psutil.Process:
    """The runtime-env agent of that cluster (a child of its raylet)."""
    return next(p for p in _raylet(driver_pid).children() if "RuntimeEnv" in " ".join(p.cmdline()))


def _gcs_server(driver_pid: int) -> psutil.Process:
    """The GCS server of that cluster: its head."""
    return next(p for p in psutil.Process(driver_pid).children() if p.name() == "gcs_server")


DRIVERS_NODE = "the Ray node this run's driver runs on"


@pytest.mark.parametrize("victim, said, in_rays_words, hold", [
    # the report: the raylet exits with its agent and tells Ray why
    # (`make test-heavy`: two Ray starts, minutes on a busy machine)
    pytest.param(_runtime_env_agent, DRIVERS_NODE, "(Ray: runtime_env_agent failed and raylet fate-shares with it)",
                 "0.3", marks=pytest.mark.heavy),
    # the raylet itself (out of memory, a crash): Ray finds it by its missed health checks
    pytest.param(_raylet, DRIVERS_NODE, "(Ray: health check failed due to missing too many heartbeats)", "0.3",
                 marks=pytest.mark.slow),
    # the head's GCS, and so the cluster: the workers still answer (nothing new is placed), so the
    # calls are held longer than the 20 s the head may stay silent
    pytest.param(_gcs_server, "the head of the Ray cluster does not answer", "(Connection refused, for ", "1.0",
                 marks=pytest.mark.slow)],
    ids=["runtime-env agent", "raylet", "gcs"])
def test_the_drivers_node_dying_ends_in_a_paragraph_and_the_resume_gives_the_uninterrupted_rows(
        tmp_path, uninterrupted, monkeypatch, victim, said, in_rays_words, hold):
    results = tmp_path / "results"
    run = Watched(RUN + RAY, _env(results, SEAKR_TEST_CALL_SECONDS=hold))
    try:
        run.wait_for(lambda: _count(results) >= 1, timeout=300)
        os.kill(victim(run.proc.pid).pid, signal.SIGKILL)
        killed = time.monotonic()
        rc = run.finish(timeout=MESSAGE_SECONDS + 60)
    finally:
        run.stop()
    told = run.first("error: The Ray run stopped")
    assert told is not None, run.stderr()
    assert told - killed <= MESSAGE_SECONDS
    assert rc == 2
    paragraph = _error_paragraph(run.stderr())
    kept = _rows(results)
    assert 1 <= len(kept) < N
    assert f"Questions kept: {len(kept)} of {N}" in paragraph
    assert f"left for the resume: {N - len(kept)}." in paragraph
    assert paragraph.startswith(f"The Ray run stopped: {said}") and in_rays_words in paragraph
    assert {qid: uninterrupted[qid] for qid in kept} == kept          # the rows kept are whole and right

    from seakr_repro.commands import status
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(status, "_results", lambda cfg: results / "smoke")
    resume = paragraph.split("then resume with: ", 1)[1].rstrip(".")
    assert f"; resume with: {resume}" in status.report(load_config("smoke")).split(f"stopped: {said}", 1)[1]

    # the command as printed, in a shell, without this test's environment for the folders
    subprocess.run(["bash", "-c", resume], cwd=tmp_path, env=_env(tmp_path / "elsewhere"), check=True,
                   capture_output=True, timeout=600)
    assert _rows(results) == uninterrupted


@pytest.mark.slow
def test_a_two_node_cluster_losing_a_node_finishes_on_the_other_with_every_question_once(
        tmp_path, uninterrupted, monkeypatch):
    from ray.cluster_utils import Cluster

    # the nodes' workers import this checkout, as every node of a real cluster must
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        second = cluster.add_node(num_cpus=1)
        results = tmp_path / "results"
        run = Watched(RUN + RAY + ["--set", f"runner.ray_address={cluster.address}"], _env(results))
        try:
            status = results / "smoke" / "workers.json"

            def both_answered():          # one worker on each node, each with a question done
                try:
                    workers = json.loads(status.read_text())["workers"]
                except (OSError, ValueError):
                    return False
                return len(workers) == 2 and all(w["answered"] for w in workers)
            run.wait_for(both_answered, timeout=300)
            cluster.remove_node(second, allow_graceful=False)        # SIGKILL: a host gone
            removed = time.monotonic()
            rc = run.finish(timeout=600)
        finally:
            run.stop()
    finally:
        cluster.shutdown()
    assert rc == 0, run.stderr()
    said = run.first(f"id {second.node_id[:8]}) died")
    assert said is not None and said - removed <= MESSAGE_SECONDS, run.stderr()
    shrank = [line for _, line in run.pieces if "[ray] node" in line]
    assert len(shrank) == 1 and "the run goes on with 1 worker, not the 2 it started with" in shrank[0]
    assert _rows(results) == uninterrupted                  # every question once, as uninterrupted
