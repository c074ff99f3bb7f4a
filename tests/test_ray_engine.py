"""runner.engine: ray on a local Ray cluster of 2 CPUs (one per module): the run grid, step 02
and notebook 11's trials give the local engine's rows with 1 and 2 workers; a worker killed
mid-question loses nothing and writes nothing twice; bad clusters are one clear error."""
import functools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ray  # noqa: E402  (pinned in requirements.txt: a missing install fails here)

from fakes import FakeBackend, FakeSearcher  # noqa: E402

from seakr_repro.runs import inputs  # noqa: E402
from seakr_repro.core.config import load_config  # noqa: E402
from seakr_repro.core.errors import UserError  # noqa: E402
from seakr_repro.data.records import QuestionRecord  # noqa: E402
from seakr_repro.retrieval.base import Hit  # noqa: E402
from seakr_repro.runs import engine_choice, fleet_backend, ray_cluster, worker_plan, workers_status  # noqa: E402
from seakr_repro.runs.fleet import Fleet  # noqa: E402


# the tests on this cluster run in `make test-heavy` (CI's second step): starting it and their runs
# took about 100 s of the fast tier
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local cluster for the module: 2 CPUs, no dashboard; workers import this checkout and
    tests/ (for the scripted backends below) and see an empty data/cache/ (SEAKR_CACHE_DIR), so
    what they find there does not depend on this machine."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SEAKR_CACHE_DIR")}
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE)] +
                                               ([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else []))
    os.environ["SEAKR_CACHE_DIR"] = str(tmp_path_factory.mktemp("workers-cache"))
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 object_store_memory=100 * 1024 ** 2)
    finally:
        for k, v in saved.items():          # the driver's own environment is left as it was
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A 2-layer LLaMA (random weights, LLaMA-style tokenizer) saved as a Hugging Face folder:
    the workers load it through the package's own loader (model.path)."""
    import llama_tok

    out = tmp_path_factory.mktemp("tiny-llama")
    tok = llama_tok.build_tokenizer(out)
    llama_tok.build_model(len(tok)).save_pretrained(out)
    return out


class PassageSearcher:
    """A searcher over made-up passages with `doc` (notebook 11 needs the gold passage)."""

    def search(self, query, k=3):
        words = [w for w in query.split() if w.isalpha()][:6] or ["none"]
        return [Hit(f"p{i}-{words[i % len(words)]}", 1.0 / (i + 1), words[i % len(words)],
                    f"{words[i % len(words)]} is a passage about {query[:30]}") for i in range(k)]

    def doc(self, pid):
        return Hit(pid, 1.0, pid, f"the gold passage {pid} names the answer")


def _cfg(tiny_dir, **more):
    return load_config("smoke", {"model.name": "llama-2-7b", "model.path": str(tiny_dir),
                                 "model.device": "cpu", "cache.enabled": False,
                                 "runner.engine": "ray", **more})


def counting_loader(cfg, name):
    """The package's loader with the call cache off and its counters on (as Table 7 times):
    every run computes, and rows carry calls and tokens."""
    from seakr_repro.llm import CachedBackend, load_backend

    return CachedBackend(load_backend(cfg, name=name, cache=False), enabled=False)


def _fleet(cfg, workers, tmp_path, **kw):
    return Fleet(cfg, workers, status_path=tmp_path / "workers.json", **kw)


# ----------------------------------------------------------------------------- settings

def test_plan_gives_one_worker_per_gpu_or_a_share_of_the_cpus():
    gpu = load_config("paper", {"runner.engine": "ray"})           # model.device: cuda
    assert worker_plan.plan_workers(gpu, {"CPU": 16, "GPU": 8}) == (8, {"num_gpus": 1, "num_cpus": 1.0})
    with pytest.raises(UserError, match="3 worker.*2 GPU"):
        worker_plan.plan_workers(gpu.with_overrides({"runner.workers": 3}), {"CPU": 8, "GPU": 2})
    tp = gpu.with_overrides({"model.backend": "vllm", "model.vllm.tensor_parallel_size": 2})
    assert worker_plan.plan_workers(tp, {"CPU": 8, "GPU": 8})[0] == 4
    with pytest.raises(UserError, match="no GPU") as err:
        worker_plan.plan_workers(gpu, {"CPU": 2})
    assert err.value.setting == "runner.ray_address"
    auto = load_config("smoke", {"runner.engine": "ray", "model.device": "auto"})
    assert worker_plan.plan_workers(auto, {"CPU": 4, "GPU": 2})[0] == 2          # GPUs when there are
    cpu = load_config("smoke", {"runner.engine": "ray", "model.device": "cpu"})
    assert worker_plan.plan_workers(cpu, {"CPU": 16, "GPU": 8}) == (16, {"num_gpus": 0, "num_cpus": 1.0})
    assert worker_plan.plan_workers(cpu, {"CPU": 2}) == (2, {"num_gpus": 0, "num_cpus": 1.0})
    four = cpu.with_overrides({"runner.workers": 4})
    assert worker_plan.plan_workers(four, {"CPU": 2}) == (4, {"num_gpus": 0, "num_cpus": 0.5})


def test_the_default_profile_stays_local():
    assert engine_choice.engine_of(load_config("default")) == "local"
    assert engine_choice.engine_of(load_config("paper")) == "local"


def test_a_bad_address_is_one_clear_error_at_once():
    cfg = load_config("smoke", {"runner.engine": "ray", "runner.ray_address": "127.0.0.1:1"})
    t0 = time.time()
    with pytest.raises(UserError, match="no Ray cluster answers at 127.0.0.1:1") as err:
        if ray.is_initialized():     # (run alone after the module's cluster started)
            ray_cluster._reachable(cfg["runner.ray_address"])
        else:
            ray_cluster.connect(cfg)
    assert err.value.setting == "runner.ray_address" and time.time() - t0 < 10
    with pytest.raises(UserError, match="not local, auto or host:port"):
        ray_cluster._reachable("headnode")


def test_while_ray_joins_its_node_a_stop_is_already_recorded_and_cleared_once_joined(tmp_path, monkeypatch):
    """A raylet dying inside `ray.init` ends the process in Ray: `status` must already say so."""
    from seakr_repro.core import disk_full, paths, stop_record

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    during = []
    monkeypatch.setattr(ray, "init", lambda **kw: during.append(stop_record.last_stop(tmp_path / "smoke")))
    cfg = load_config("smoke", {"runner.engine": "ray"})
    with disk_full.recording_stop_of(disk_full.Run("smoke", "the resume command"), reserve=True):
        assert ray_cluster.connect(cfg)
    assert during[0]["stopped"] == ("Ray ended the driver while it joined the Ray node this run started (its "
                                    "node failed as it started; Ray's own last line says why)")
    assert during[0]["resume"] == "the resume command"
    assert stop_record.last_stop(tmp_path / "smoke") is None            # joined: nothing stopped
    with disk_full.recording_stop_of(disk_full.Run("other", "x")):               # a command that writes no results
        assert ray_cluster.connect(cfg)
    assert len(during) == 2 and not (tmp_path / "other").exists()


@pytest.mark.heavy
def test_a_cuda_profile_on_a_cluster_without_gpus_is_one_clear_error(cluster, tmp_path):
    cfg = load_config("paper", {"runner.engine": "ray"})           # model.device: cuda
    with pytest.raises(UserError, match="model.device is cuda but the Ray cluster has no GPU"):
        _fleet(cfg, None, tmp_path)
    assert ray.is_initialized()             # the module's cluster is left as it was


# ----------------------------------------------------------------------------- same rows

def _grid(cfg, pool, searcher, tmp_path, monkeypatch, records, tag):
    from seakr_repro.artifacts import RunSpec
    from seakr_repro.runs import grid, runner

    monkeypatch.setattr(inputs, "load_prepared", lambda cfg, dataset: records)
    monkeypatch.setattr(grid, "deltas_for", lambda cfg: {"eigen": -6.0})
    monkeypatch.setattr(grid, "results_dir", lambda profile: tmp_path / tag)
    monkeypatch.setattr(runner, "run_path",
                        lambda p, d, label, c: tmp_path / tag / d / f"{label}-{runner.config_hash(c)}.jsonl")
    specs = [RunSpec("seakr", "seakr"), RunSpec("cot", "cot")]
    res, skipped = grid.run_grid(cfg, pool, searcher, specs, ["bundled-2wiki"], progress=False)
    assert not skipped
    out = {}
    for path in sorted((tmp_path / tag / "bundled-2wiki").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(rows) == len({r["id"] for r in rows}) == len(records)     # each once
        out[path.name] = {r["id"]: {k: v for k, v in r.items() if k != "seconds"} for r in rows}
    return res.drop(columns=["seconds_per_q"]), out


@pytest.mark.heavy
def test_run_grid_rows_match_the_local_engine_with_1_and_2_workers(cluster, tiny_dir, tmp_path, monkeypatch):
    from seakr_repro.data.registry import load_dataset
    from seakr_repro.runs.grid import BackendPool

    records = load_dataset("bundled-2wiki", n=3, seed=1)
    searcher = PassageSearcher()
    local_cfg = _cfg(tiny_dir, **{"runner.engine": "local"})
    local = _grid(local_cfg, BackendPool(local_cfg, loader=counting_loader), searcher, tmp_path,
                  monkeypatch, records, "local")
    for workers in (1, 2):
        fleet = _fleet(_cfg(tiny_dir), workers, tmp_path, searcher=searcher, loader=counting_loader)
        assert fleet.size == workers
        try:
            got = _grid(fleet.cfg, fleet_backend.FleetPool(fleet), searcher, tmp_path, monkeypatch, records,
                        f"ray{workers}")
            assert sum(w["answered"] for w in fleet._slots.values()) == 2 * len(records)
            if workers == 2:     # both workers answered, each loading the model once
                assert all(w["answered"] for w in fleet._slots.values())
                loads = [ray.get(w["handle"].__ray_call__.remote(lambda self: self.loads))
                         for w in fleet._slots.values()]
                assert loads == [1, 1]
        finally:
            fleet.close()
        assert got[1] == local[1]                   # answers, U (traces), calls, tokens: identical
        assert got[0].equals(local[0])
    rows = next(iter(local[1].values()))
    assert all(r["llm_calls"] > 0 and r["tokens"] > 0 for r in rows.values())


@pytest.mark.heavy
def test_step_02_and_notebook_11_match_the_local_engine(cluster, tiny_dir, tmp_path, monkeypatch):
    from seakr_repro.data.registry import load_dataset
    from seakr_repro.llm import load_backend
    from seakr_repro.steps import extraction, mechanisms

    records = load_dataset("bundled-single", n=3, seed=1)
    searcher = PassageSearcher()
    pairs = mechanisms.gold_passages(records, searcher)
    local_cfg = _cfg(tiny_dir, **{"runner.engine": "local"})

    def both(backend, tag):
        monkeypatch.setattr(extraction, "results_dir", lambda profile: tmp_path / tag)
        out = extraction.run_extraction(backend, records, local_cfg, 1, progress=False)
        rows = {r["id"]: r for r in map(json.loads, (out / "questions.jsonl").read_text().splitlines())}
        vectors = {r.id: np.load(extraction.vector_path(out, r.id)) for r in records}
        rerank, retrieval = mechanisms.run_mechanisms(pairs, searcher, backend, local_cfg, tmp_path / tag / "11",
                                                      2, 1, [2, 4], progress=False)
        return (rows, vectors, rerank.sort_values("id", ignore_index=True),
                retrieval.sort_values(["id", "condition"], ignore_index=True))

    # the same torch thread count as the workers (they inherit OMP_NUM_THREADS from this process):
    # on a CPU, matrix products summed over another number of threads differ in the last bits
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", before)))
    try:
        want = both(load_backend(local_cfg), "local")
    finally:
        torch.set_num_threads(before)
    fleet = _fleet(_cfg(tiny_dir), 2, tmp_path, searcher=searcher)
    try:
        got = both(fleet.backend(), "ray")
    finally:
        fleet.close()
    differ = {(qid, k) for qid in want[0] for k in set(want[0][qid]) | set(got[0].get(qid, {}))
              if want[0][qid].get(k) != got[0].get(qid, {}).get(k)}
    assert not differ and len(got[0]) == 3, sorted(differ)
    for qid, v in want[1].items():
        np.testing.assert_array_equal(got[1][qid], v)
    assert got[2].equals(want[2]) and got[3].equals(want[3])


# ----------------------------------------------------------------------------- faults

def scripted_loader(marker_dir, cfg, name):
    """A scripted backend whose question "q2" hangs the first time (a marker file says it did):
    the test kills the worker that holds it."""
    marker = Path(marker_dir) / "slow-started"

    def respond(prompt, stop):
        if "Question: Who wrote q2?" in prompt.split("\n\n")[-1] and not marker.exists():
            marker.touch()
            time.sleep(120)
        return "So the answer is Ann."
    return FakeBackend(respond, name=name)


@pytest.mark.heavy
def test_a_worker_killed_mid_question_loses_nothing_and_writes_nothing_twice(cluster, tmp_path):
    from seakr_repro.runs.runner import read_results, run_method

    cfg = load_config("smoke", {"runner.engine": "ray"})
    records = [QuestionRecord(f"q{i}", f"Who wrote q{i}?", ["Ann"]) for i in range(8)]
    fleet = _fleet(cfg, 2, tmp_path, loader=functools.partial(scripted_loader, str(tmp_path)),
                   searcher=FakeSearcher([]))
    killed = {}

    def killer():
        deadline = time.time() + 60
        while time.time() < deadline and not killed:
            if (tmp_path / "slow-started").exists():
                for slot, w in list(fleet._slots.items()):
                    if "q2" in list(w["in_flight"].values()):
                        killed[slot] = w["info"]["pid"]
                        os.kill(w["info"]["pid"], signal.SIGKILL)
                        break
            time.sleep(0.05)

    try:
        backend = fleet.backend()
        method = backend.method("cot", "bundled-2wiki", {"n_shot": 1})
        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        out = tmp_path / "run.jsonl"
        t0 = time.time()
        rows = run_method(method, records, out, backend=backend, progress=False)
        thread.join()
        assert killed, "the slow question never started"
        assert time.time() - t0 < 100                        # q2 was re-run, not waited for
        slot = next(iter(killed))
        assert fleet._slots[slot]["restarts"] == 1            # the dead worker was replaced
        assert fleet.pids()[slot] != killed[slot]
        status = json.loads((tmp_path / "workers.json").read_text())
        assert sum(w["restarts"] for w in status["workers"]) == 1
        # a worker whose package builds another config (another version on its node) refuses
        method.spec["config_hash"] = "0000000000"
        with pytest.raises(UserError, match="builds cot with config .*0000000000"):
            list(fleet.map([("q0", method.task(records[0]))]))
    finally:
        fleet.close()
    written = read_results(out)
    assert sorted(r["id"] for r in written) == sorted(r.id for r in records)   # all, each once
    assert {r["answer"] for r in written} == {"Ann"} and len(rows) == 8
    assert not (tmp_path / "workers.json").exists()           # gone when the fleet closes


def full_disk_loader(target, cfg, name):
    """A backend whose every call meets a full disk while writing `target`."""
    import errno

    from seakr_repro.core.disk_full import writing

    def respond(prompt, stop):
        with writing(target):
            raise OSError(errno.ENOSPC, "No space left on device", target)
    return FakeBackend(respond, name=name)


@pytest.mark.heavy
def test_a_full_disk_in_a_worker_says_the_drivers_resume_command_and_is_recorded(cluster, tmp_path, monkeypatch):
    """The paragraph comes from the worker, where the disk filled, with what the driver's command
    said (its resume command and estimate); the driver records the stop for `status`."""
    from seakr_repro.core import disk_full, paths, stop_record
    from seakr_repro.runs.runner import run_method

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path / "results")
    cfg = load_config("smoke", {"runner.engine": "ray"})
    resume = "python -m seakr_repro run --profile smoke --method cot --dataset bundled-2wiki"
    run = disk_full.Run("smoke", resume, lambda: [("run files", 5 * 2 ** 20, tmp_path)])
    target = tmp_path / "cache" / "calls.sqlite"
    records = [QuestionRecord("q0", "Who wrote q0?", ["Ann"])]
    with pytest.raises(disk_full.DiskFullError) as caught:
        with disk_full.recording_stop_of(run, reserve=True):
            fleet = _fleet(cfg, 1, tmp_path, loader=functools.partial(full_disk_loader, str(target)),
                           searcher=FakeSearcher([]))
            try:
                backend = fleet.backend()
                method = backend.method("cot", "bundled-2wiki", {"n_shot": 1})
                run_method(method, records, tmp_path / "run.jsonl", backend=backend, progress=False)
            finally:
                fleet.close()
    text = caught.value.paragraph()
    assert f"writing {target}" in text and "No space left on device" in text
    assert f"then resume with: {resume}." in text
    assert "The rest of the profile smoke's run needs up to 5.0 MiB more there" in text
    stop = stop_record.last_stop(tmp_path / "results" / "smoke")
    assert stop is not None and stop["resume"] == resume and stop["paragraph"] == text


# ----------------------------------------------------------------------------- cost and status

def test_cost_divides_the_hours_over_workers_and_says_it_is_arithmetic():
    """`cost --workers` prints the division (tests/test_cost.py)."""
    from seakr_repro.runs.preflight import spread

    assert spread(550.0, 8) == 68.75
    with pytest.raises(UserError):
        spread(10.0, 0)


def test_status_lists_the_workers_and_says_when_their_driver_is_gone(tmp_path, monkeypatch):
    import socket
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    doc = {"engine": "ray", "address": "local", "driver_pid": os.getpid(), "driver_host": socket.gethostname(),
           "updated": "2026-01-01T00:00:00", "resources_each": {"num_cpus": 1.0},
           "workers": [{"worker": 0, "host": "n1", "pid": 11, "gpus": ["0"], "answered": 5,
                        "in_flight": ["q7"], "restarts": 0},
                       {"worker": 1, "host": "n2", "pid": 12, "gpus": ["1"], "answered": 4,
                        "in_flight": [], "restarts": 1, "state": "gone: its node died"}]}
    assert workers_status.workers_report(tmp_path) is None                  # no Ray run: nothing to say
    (tmp_path / "workers.json").write_text(json.dumps(doc))
    text = workers_status.workers_report(tmp_path)
    assert "Ray workers (2, cluster local" in text and "not running" not in text
    assert "| q7 " in text and "n2" in text and "| gone: its node died |" in text
    doc["driver_pid"] = gone.pid
    (tmp_path / "workers.json").write_text(json.dumps(doc))
    assert "its driver is not running" in workers_status.workers_report(tmp_path)
    from seakr_repro.commands import status                           # `status` prints it
    monkeypatch.setattr(status, "_results", lambda cfg: tmp_path)
    assert "Ray workers (2" in status.report(load_config("smoke"))


@pytest.mark.heavy
def test_preflight_surveys_a_joined_cluster(cluster, tmp_path, monkeypatch):
    from seakr_repro.retrieval import index as index_mod
    from seakr_repro.runs.preflight import Report, check_cluster

    cfg = load_config("smoke", {"runner.engine": "ray", "runner.ray_address": "auto"})
    # the workers' data/cache/ is empty (the fixture); the driver's index is where the test says
    monkeypatch.setattr(index_mod, "index_dir_for", lambda *a: tmp_path / "idx")
    report = Report()
    check_cluster(cfg, report)
    assert not report.problems and "2 workers (1 CPU each) on 1 node(s)" in report.ok[0]
    assert "index: not built yet" in report.ok[1]
    # the index is here (on the driver's disk) but not where the workers look
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / index_mod.META_NAME).write_text("{}")
    report = Report()
    check_cluster(cfg, report)
    assert len(report.problems) == 1 and "do not see the BM25 index" in report.problems[0]
    report = Report()
    check_cluster(load_config("paper", {"runner.engine": "ray", "runner.ray_address": "auto"}), report)
    assert "model.device is cuda but the Ray cluster has no GPU" in report.problems[0]
    assert not (tmp_path / "workers.json").exists() and ray.is_initialized()
    # runner.ray_address: local plans against this machine without starting a cluster
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    report = Report()
    check_cluster(load_config("smoke", {"runner.engine": "ray"}), report)
    assert report.ok == [f"Ray: {os.cpu_count()} workers (1 CPU each) in a cluster started on this machine"]


def test_the_benchmark_arithmetic_for_8_gpus_comes_from_the_cost_count():
    from seakr_repro.benchmarks import ray_engine
    from seakr_repro.runs.plan import question_runs
    from seakr_repro.runs.preflight import totals, with_hours

    rows = {r["profile"]: r for r in ray_engine.arithmetic(8)}
    hours = totals(with_hours(question_runs(load_config("paper"))))[2]
    assert rows["paper"]["hours_over_workers"] == round(hours / 8, 1)
    assert rows["paper-sample"]["question_runs"] < rows["paper"]["question_runs"]


def test_notebook_10_says_it_stays_on_the_local_engine(monkeypatch):
    import seakr_repro.llm as llm
    from seakr_repro.steps import seed_methods

    def stop(cfg):
        raise RuntimeError("stop here")
    monkeypatch.setattr(llm, "load_backend", stop)
    with pytest.warns(UserWarning, match="notebook 10 runs on the local engine"), \
            pytest.raises(RuntimeError, match="stop here"):
        seed_methods.run_step(load_config("smoke", {"runner.engine": "ray"}), 1, 4, 4, {})
