"""The Ray engine (`runner.engine: ray`): the per-question loops (the run grid, step 02's
extraction, notebook 11's trials) spread over Ray actors, one model each.

- A `ray_worker.Worker` actor loads once: one backend (the profile's model, or the one a task names; one at a
  time, as `pool.BackendPool`) on its own GPU (`num_gpus` = 1, or the vLLM tensor-parallel size)
  or a share of the CPUs, and the searcher over the shared BM25 index in data/cache/. It builds
  each method once and answers any question of any method of the profile.
- One writer: the driver (`Fleet.map`) hands out tasks, receives each finished question and
  writes it exactly as the local engine does (`runner.run_method`, `extraction.run_extraction`,
  `mechanisms.run_mechanisms`): the same resumable, fsync'ed files, rows in the order they finish.
- Same results: a question's seeds come from the profile and the call (`seed`), never from the
  worker or the order, and a worker answers one question at a time (runner.concurrency at a
  time where that is set), so 1 worker, N workers and the local engine write identical rows.
- Faults: a worker that dies (out of memory, a lost node) is replaced and its questions go back
  to the queue for whichever worker is free first; only a finished question's row is written,
  and each once. A question that kills MAX_KILLS workers stops the run with its id. The driver
  dying is the local engine's resume.
- `results/<profile>/workers.json` says which workers run where and what each has done
  (`status` shows it).
"""
from __future__ import annotations

import json
import os
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..core.errors import UserError

ENGINES = ("local", "ray")
MAX_KILLS = 3              # workers one question may take down before the run stops
STATUS_FILE = "workers.json"


# ------------------------------------------------------------------------------------ settings

def engine_of(cfg) -> str:
    """runner.engine, checked."""
    name = cfg.get("runner.engine", "local") or "local"
    if name not in ENGINES:
        raise UserError(f"unknown runner.engine {name!r}", setting="runner.engine",
                        fix="use local (this process) or ray (Ray workers, one model each)")
    return name


def uses_ray(cfg) -> bool:
    return engine_of(cfg) == "ray"


def wants_gpu(cfg, resources: dict) -> bool:
    """Whether workers take a GPU each: model.device cuda, or auto on a cluster that has GPUs."""
    if cfg.get("model.backend", "hf") == "synthetic":
        return False
    device = cfg.get("model.device", "auto")
    if device == "cuda" and not resources.get("GPU"):
        raise UserError("model.device is cuda but the Ray cluster has no GPU "
                        f"(it offers {_offer(resources)})", setting="runner.ray_address",
                        fix="join a cluster whose nodes have GPUs (`ray start` on each GPU node), or "
                            "set model.device: auto or cpu to run on CPU workers")
    return device == "cuda" or (device == "auto" and bool(resources.get("GPU")))


def gpus_per_worker(cfg) -> int:
    """1, or vLLM's tensor_parallel_size where a number is set (auto = 1 per worker: a model that
    fits one card needs no splitting)."""
    if cfg.get("model.backend", "hf") == "vllm":
        tp = cfg.get("model.vllm.tensor_parallel_size", "auto")
        return int(tp) if isinstance(tp, int) else 1
    return 1


def plan_workers(cfg, resources: dict) -> tuple[int, dict]:
    """(number of workers, Ray resources of each) for a cluster offering `resources`:
    runner.workers (auto: one per GPU, or per CPU on a CPU cluster), each with its GPUs, or an
    equal share of the CPUs."""
    setting = cfg.get("runner.workers", "auto")
    gpus, cpus = float(resources.get("GPU", 0)), float(resources.get("CPU", 0))
    if setting != "auto" and (not isinstance(setting, int) or setting < 1):
        raise UserError(f"runner.workers is {setting!r}", setting="runner.workers",
                        fix="give a number of workers (1 or more) or auto")
    if wants_gpu(cfg, resources):
        per = gpus_per_worker(cfg)
        n = int(gpus // per) if setting == "auto" else setting
        if n < 1 or n * per > gpus:
            raise UserError(f"{n or 1} worker(s) x {per} GPU(s) each, but the Ray cluster has "
                            f"{gpus:g} GPU(s)", setting="runner.workers",
                            fix=f"set runner.workers: auto (= {int(gpus // per)} here) or fewer, or "
                                "add GPU nodes to the cluster")
        return n, {"num_gpus": per, "num_cpus": min(1.0, cpus / n) if cpus else 0}
    if cpus < 1:
        raise UserError(f"the Ray cluster offers no CPU ({_offer(resources)})",
                        setting="runner.ray_address", fix="start the cluster with CPUs (ray start --num-cpus N)")
    n = int(cpus) if setting == "auto" else setting
    return n, {"num_gpus": 0, "num_cpus": cpus / n}


def asks(each: dict) -> str:
    """A worker's Ray resources in words: "1 GPU, 1 CPU"."""
    return ", ".join(f"{each[k]:g} {name}" for k, name in (("num_gpus", "GPU"), ("num_cpus", "CPU"))
                     if each.get(k))


def _offer(resources: dict) -> str:
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in ("CPU", "GPU"))


def connect(cfg, num_cpus: int | None = None) -> bool:
    """Start (runner.ray_address: local) or join (auto, or host:port) a Ray cluster, or use the one
    this process already joined; True when this call started or joined it (and should leave it)."""
    import ray

    if ray.is_initialized():
        return False
    address = str(cfg.get("runner.ray_address", "local") or "local")
    quiet = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    if address == "local":
        ray.init(address="local", num_cpus=num_cpus, **quiet)
        return True
    if address != "auto" and not address.startswith("ray://"):
        _reachable(address)          # ray.init would wait minutes for an address nothing answers
    try:
        ray.init(address=address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise UserError(f"cannot join the Ray cluster at {address}: {str(err).splitlines()[0]}",
                        setting="runner.ray_address",
                        fix="start it first (`ray start --head` on the head node), give its "
                            "host:port, or use local to start one in this process") from None
    return True


def _reachable(address: str, timeout: float = 3.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"runner.ray_address {address!r} is not local, auto or host:port",
                        setting="runner.ray_address",
                        fix="use local, auto (the cluster `ray start` made on this node) or "
                            "HEAD_HOST:6379")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(f"no Ray cluster answers at {address} ({err.strerror or err})",
                        setting="runner.ray_address",
                        fix="start the head node with `ray start --head --port PORT`, check the "
                            "host and port (and the firewall), or use local") from None


# ------------------------------------------------------------------------------------ driver

def _faults() -> tuple:
    """Ray's errors for a worker or its node gone (the question is re-run elsewhere)."""
    import ray.exceptions as rx

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
             "NodeDiedError", "ObjectLostError", "OutOfMemoryError", "LocalRayletDiedError")
    return tuple(getattr(rx, n) for n in names if hasattr(rx, n))


def _unwrap(err: BaseException) -> BaseException:
    """The exception a worker raised (a UserError stays a UserError), not Ray's wrapper."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


class Fleet:
    """Ray workers of one profile, and the driver's side: `map` hands out tasks and yields each
    result as it arrives, replacing a dead worker and re-queueing its questions."""

    def __init__(self, cfg, workers: int | str | None = None, *, loader: Callable | None = None,
                 searcher=None, status_path: str | Path | bool | None = None, num_cpus: int | None = None):
        import ray

        if workers is not None:                   # instead of runner.workers (tests, the benchmark)
            cfg = cfg.with_overrides({"runner.workers": workers})
        self.cfg = cfg
        self._owns_ray = connect(cfg, num_cpus)
        try:
            resources = ray.cluster_resources()
            self.size, self.resources = plan_workers(cfg, resources)
        except BaseException:
            self._leave()
            raise
        per_worker = int(cfg.get("runner.concurrency", 1) or 1)
        from .ray_worker import Worker
        self._cls = ray.remote(Worker).options(
            max_restarts=0, max_concurrency=max(1, per_worker), **self.resources)
        self._args = (cfg, loader, searcher)
        # status_path None: results/<profile>/workers.json; False: none (preflight's survey)
        self._status_path = (None if status_path is False else
                             Path(status_path) if status_path else _default_status_path(cfg))
        self._slots: dict[int, dict] = {}
        self._kills: dict[str, int] = {}
        for slot in range(self.size):
            self._start(slot)
        self._await_infos()
        self._write_status(force=True)

    # -- workers -------------------------------------------------------------------------------
    def _start(self, slot: int) -> None:
        old = self._slots.get(slot, {})
        handle = self._cls.remote(*self._args)
        self._slots[slot] = {"handle": handle, "generation": old.get("generation", -1) + 1,
                             "restarts": old.get("restarts", -1) + 1, "answered": old.get("answered", 0),
                             "in_flight": {}, "info": None, "info_ref": handle.info.remote(),
                             "failed_starts": old.get("failed_starts", 0)}

    def _await_infos(self, timeout: float = 600) -> None:
        import ray
        from ray.exceptions import GetTimeoutError

        for slot, w in self._slots.items():
            if w["info"] is None and w["info_ref"] is not None:
                try:
                    w["info"] = ray.get(w["info_ref"], timeout=timeout)
                except GetTimeoutError:
                    self.close()
                    raise UserError(f"Ray could not start worker {slot} within {timeout:.0f} s "
                                    f"(each asks for {self._asks()})", setting="runner.workers",
                                    fix="check `ray status`: the cluster may lack those resources; "
                                        "lower runner.workers") from None
                except Exception as err:  # noqa: BLE001 - re-raised as the worker's own error
                    self.close()
                    raise _unwrap(err) from None
                w["info_ref"] = None

    def _started(self, slot: int) -> bool:
        """Whether the worker in `slot` is up (its `info` came back), without waiting."""
        import ray

        w = self._slots[slot]
        if w["info"] is not None:
            return True
        if not ray.wait([w["info_ref"]], timeout=0)[0]:
            return False
        try:
            w["info"] = ray.get(w["info_ref"])
        except _faults() as err:
            if w["failed_starts"] + 1 >= MAX_KILLS:
                raise UserError(f"Ray worker {slot} died {MAX_KILLS} times while starting: "
                                f"{str(err).splitlines()[0]}", setting="runner.workers",
                                fix="check that every node has this package and its .venv at the same "
                                    "path; see /tmp/ray/session_latest/logs on the node") from None
            self._replace(slot, w["generation"])
            self._slots[slot]["failed_starts"] = w["failed_starts"] + 1
            return False
        except Exception as err:  # noqa: BLE001 - the worker's own error
            raise _unwrap(err) from None
        w["info_ref"], w["failed_starts"] = None, 0
        return True

    def _asks(self) -> str:
        return asks(self.resources)

    def pids(self) -> dict[int, int]:
        """{slot: process id} of the live workers (the kill test stops one by its id)."""
        self._await_infos()
        return {slot: w["info"]["pid"] for slot, w in self._slots.items()}

    def infos(self) -> list[dict]:
        self._await_infos()
        return [dict(w["info"], slot=slot) for slot, w in self._slots.items()]

    def call(self, name: str, *args) -> Any:
        """One request to one live worker (describe, method_info), retried on another when it dies."""
        import ray

        for _ in range(MAX_KILLS):
            slot = next(iter(self._slots))
            w = self._slots[slot]
            try:
                return ray.get(getattr(w["handle"], name).remote(*args))
            except _faults():
                self._replace(slot, w["generation"])
            except Exception as err:  # noqa: BLE001 - the worker's own error
                raise _unwrap(err) from None
        raise UserError(f"Ray workers kept dying while answering {name}", setting="runner.workers",
                        fix="see the workers' logs (/tmp/ray/session_latest/logs) for why")

    def warm(self, model: str | None = None, cached: bool = True) -> None:
        """Every worker loads `model` now, side by side, rather than on its first question."""
        import ray

        refs = {slot: (w["generation"], w["handle"].describe.remote(model, cached))
                for slot, w in self._slots.items()}
        for slot, (generation, ref) in refs.items():
            try:
                ray.get(ref)
            except _faults():
                self._replace(slot, generation)
            except Exception as err:  # noqa: BLE001 - the worker's own error
                raise _unwrap(err) from None

    def _replace(self, slot: int, generation: int) -> None:
        """Start a fresh worker in `slot` unless that already happened for this generation."""
        import ray

        w = self._slots[slot]
        if w["generation"] != generation:
            return
        try:
            ray.kill(w["handle"], no_restart=True)
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        self._start(slot)

    # -- the loop ------------------------------------------------------------------------------
    def map(self, tasks: Iterable[tuple[str, tuple]], per_worker: int = 1) -> Iterator[tuple[str, Any]]:
        """Yield (key, result) for every (key, task) as workers finish them, each key once.

        `per_worker` tasks are in flight on each worker. A worker that dies is replaced and its
        tasks go back to the front of the queue. On a task's own error nothing new starts; the
        running tasks finish (their results are yielded) and the error is raised."""
        import ray

        queue = deque(tasks)
        inflight: dict[Any, tuple[int, int, str, tuple]] = {}
        seen: set[str] = set()
        error: BaseException | None = None
        per_worker = max(1, int(per_worker or 1))
        try:
            while queue or inflight:
                for slot, w in list(self._slots.items()):
                    # a worker still starting (a replacement waiting for a free GPU) gets nothing
                    while (queue and error is None and len(w["in_flight"]) < per_worker
                           and self._started(slot)):
                        key, task = queue.popleft()
                        ref = w["handle"].run.remote(task)
                        inflight[ref] = (slot, w["generation"], key, task)
                        w["in_flight"][ref] = key
                self._write_status()
                starting = [w["info_ref"] for w in self._slots.values() if w["info_ref"] is not None]
                if not inflight and not (queue and error is None and starting):
                    break
                ready, _ = ray.wait(list(inflight) + starting, num_returns=1)
                for ref in ready:
                    if ref not in inflight:          # a worker has started: served next turn
                        continue
                    slot, generation, key, task = inflight.pop(ref)
                    w = self._slots[slot]
                    w["in_flight"].pop(ref, None)
                    try:
                        result = ray.get(ref)
                    except _faults():
                        self._kills[key] = self._kills.get(key, 0) + 1
                        if self._kills[key] >= MAX_KILLS:
                            error = error or UserError(
                                f"question {key} took down {MAX_KILLS} Ray workers in a row",
                                setting="runner.workers",
                                fix="see the workers' logs (/tmp/ray/session_latest/logs); out of "
                                    "memory: lower model.max_batch_contexts or use bigger GPUs")
                        else:
                            queue.appendleft((key, task))      # re-run on whichever worker is free
                        self._requeue_dead(slot, generation, inflight, queue)
                        self._replace(slot, generation)
                        continue
                    except Exception as err:  # noqa: BLE001 - raised once the others finished
                        error = error or _unwrap(err)
                        queue.clear()
                        continue
                    if key in seen:                             # never written twice
                        continue
                    seen.add(key)
                    if w["generation"] == generation:
                        w["answered"] += 1
                    yield key, result
        finally:
            self._write_status(force=True)
        if error is not None:
            raise error

    def _requeue_dead(self, slot: int, generation: int, inflight: dict, queue: deque) -> None:
        """The dead worker's other tasks go back to the queue now (their refs are dropped)."""
        for ref, (s, g, key, task) in list(inflight.items()):
            if s == slot and g == generation:
                del inflight[ref]
                self._slots[slot]["in_flight"].pop(ref, None)
                queue.appendleft((key, task))

    # -- status --------------------------------------------------------------------------------
    _last_status = 0.0

    def _write_status(self, force: bool = False) -> None:
        if self._status_path is None or (not force and time.time() - self._last_status < 2.0):
            return
        self._last_status = time.time()
        workers = []
        for slot, w in sorted(self._slots.items()):
            info = w["info"] or {}
            workers.append({"worker": slot, "host": info.get("host"), "pid": info.get("pid"),
                            "gpus": info.get("gpus"), "answered": w["answered"],
                            "in_flight": sorted(w["in_flight"].values()), "restarts": w["restarts"]})
        doc = {"engine": "ray", "address": self.cfg.get("runner.ray_address", "local"),
               "driver_pid": os.getpid(), "driver_host": socket.gethostname(),
               "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "resources_each": self.resources,
               "workers": workers}
        from ..core.io import atomic_open
        self._status_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(self._status_path, "w") as fh:
            json.dump(doc, fh, indent=1)

    # -- the end -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the workers (their models go with them); leave the cluster if this joined it."""
        import ray

        for w in self._slots.values():
            try:
                ray.kill(w["handle"], no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass
        self._slots.clear()
        if self._status_path is not None and self._status_path.is_file():
            self._status_path.unlink()
        self._leave()

    def _leave(self) -> None:
        if self._owns_ray:
            import ray
            ray.shutdown()
            self._owns_ray = False

    def backend(self, model: str | None = None, cached: bool = True, dtype: str | None = None) -> "FleetBackend":
        return FleetBackend(self, model, cached, dtype)


def _default_status_path(cfg) -> Path | None:
    from ..core.paths import RESULTS_ROOT
    return RESULTS_ROOT / cfg.profile / STATUS_FILE


# ------------------------------------------------------------------------------------ stand-ins

class FleetBackend:
    """The driver's handle on one model as the workers hold it: its name and shapes (asked of a
    worker, which loads it), `fleet` for the loops, and `method` to describe a method on it.
    `concurrent` is True because the worker's own backend decides: `RemoteMethod` carries its
    answer."""

    concurrent = True

    def __init__(self, fleet: Fleet, model: str | None = None, cached: bool = True, dtype: str | None = None):
        self.fleet, self.model, self.cached, self.dtype = fleet, model or fleet.cfg["model.name"], cached, dtype
        for key, value in fleet.call("describe", self.model, cached, dtype).items():
            setattr(self, key, value)

    def method(self, method: str, dataset: str, settings: dict) -> "RemoteMethod":
        spec = {"model": self.model, "cached": self.cached, "dtype": self.dtype, "method": method,
                "dataset": dataset, "settings": dict(settings)}
        return RemoteMethod(spec, self.fleet.call("method_info", spec))

    def close(self) -> None:
        """Nothing here: each worker holds its own copy (the fleet closes them)."""


class RemoteMethod:
    """A method as the workers build it: its name and config (the run file's key) and why its
    questions must run one at a time, if so; `task(record)` is one question for `Fleet.map`."""

    def __init__(self, spec: dict, info: dict):
        from .runner import config_hash

        self.name, self.config = info["name"], info["config"]
        self.spec = {**spec, "config_hash": config_hash(self.config)}   # every worker checks it
        self.one_question_at_a_time = info["one_at_a_time"]

    def task(self, record, scorer=None, concurrency: int = 1) -> tuple:
        return ("question", self.spec, record, scorer, concurrency)


class FleetPool:
    """`pool.BackendPool` on Ray workers: `get(name)` gives a `FleetBackend` (each worker loads
    the model on first use and drops the one before); `close` stops the workers."""

    def __init__(self, fleet: Fleet):
        self.fleet, self.cfg = fleet, fleet.cfg

    def get(self, name: str | None = None, dtype: str | None = None) -> FleetBackend:
        return self.fleet.backend(name, dtype=dtype)

    def close(self) -> None:
        self.fleet.close()


def open_pool(cfg, primary: bool = True, **fleet_args):
    """The backend pool of the profile's engine: local (with `primary`, the profile's model
    loaded now) or Ray workers."""
    from .pool import BackendPool

    if uses_ray(cfg):
        return FleetPool(Fleet(cfg, **fleet_args))
    from ..llm import load_backend
    return BackendPool(cfg, load_backend(cfg) if primary else None)


def open_backend(cfg, cached: bool = True, dtype: str | None = None, **fleet_args):
    """The profile's model (in `dtype`, default model.dtype) on the profile's engine: loaded here,
    or a `FleetBackend` on Ray workers; `cached` False = the call cache off, its counters on
    (Table 7's timing). Give it back with `close_backend`."""
    if uses_ray(cfg):
        fleet = Fleet(cfg, **fleet_args)
        try:
            return fleet.backend(cached=cached, dtype=dtype)
        except BaseException:
            fleet.close()
            raise
    from .ray_worker import load_model
    return load_model(cfg, cached=cached, dtype=dtype)


def close_backend(backend) -> None:
    """Free what `open_backend` gave: the model here, or the Ray workers."""
    fleet = getattr(backend, "fleet", None)
    if fleet is not None:
        fleet.close()
        return
    close = getattr(backend, "close", None)
    if callable(close):
        close()


def read_status(results: Path) -> dict | None:
    """workers.json of a profile's results folder, or None (no Ray run, or it ended)."""
    path = Path(results) / STATUS_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def workers_report(results: Path) -> str | None:
    """`status`'s lines on the Ray workers of a run (None when no Ray run is on): each worker's
    host, GPUs, questions answered, in flight and restarts; a driver gone is said."""
    doc = read_status(results)
    if not doc:
        return None
    import pandas as pd

    alive = ""
    if doc.get("driver_host") == socket.gethostname() and doc.get("driver_pid"):
        try:
            os.kill(int(doc["driver_pid"]), 0)
        except ProcessLookupError:
            alive = " -- its driver is not running (the run stopped; resume runs it again)"
        except PermissionError:
            pass
    table = pd.DataFrame([{"worker": w["worker"], "host": w.get("host"), "pid": w.get("pid"),
                           "gpus": ",".join(w.get("gpus") or []) or "-", "answered": w["answered"],
                           "in flight": ", ".join(w["in_flight"]) or "-", "restarts": w["restarts"]}
                          for w in doc.get("workers", [])])
    head = (f"Ray workers ({len(table)}, cluster {doc.get('address')}, driver pid {doc.get('driver_pid')} "
            f"on {doc.get('driver_host')}, updated {doc.get('updated')}){alive}:")
    return head + "\n" + table.to_markdown(index=False)


def survey(cfg) -> tuple[int, dict, list[dict] | None]:
    """(workers, Ray resources of each, what each worker sees) for preflight. A cluster to join
    (runner.ray_address auto or host:port) is joined and its workers started without a model
    (`Worker.info`: host, GPUs and their memory, whether the index is there); `local` plans
    against this machine (torch's GPUs, its CPUs) without starting anything (infos None)."""
    import ray

    address = str(cfg.get("runner.ray_address", "local") or "local")
    if address == "local" and not ray.is_initialized():
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        n, each = plan_workers(cfg, {"CPU": float(os.cpu_count() or 1), "GPU": float(gpus)})
        return n, each, None
    fleet = Fleet(cfg, status_path=False)
    try:
        return fleet.size, fleet.resources, fleet.infos()
    finally:
        fleet.close()


def method_on(backend, name: str, searcher, dataset: str, settings: dict):
    """`methods.build_method` here, or its `RemoteMethod` when `backend` is a `FleetBackend`."""
    if isinstance(backend, FleetBackend):
        return backend.method(name, dataset, settings)
    from ..methods import build_method
    return build_method(name, backend, searcher, dataset, **settings)
