"""The Ray engine's driver (`runner.engine: ray`): the per-question loops spread over Ray actors,
one model each (`ray_worker.Worker`). The driver is the one writer, so 1 worker, N workers and the
local engine write identical rows. A dead worker is replaced and its questions re-queued (MAX_KILLS
per question); a dead node's workers are replaced where there is room, else dropped; losing the
driver's node, the head or every worker stops the run with one paragraph (`ray_nodes.ClusterLost`).
docs/paper-profile.md (the Ray engine) has the rules."""
from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..core import disk_full
from ..core.errors import UserError
from ..core.progress import say
from .fleet_backend import FleetBackend
from .ray_cluster import connect
from .ray_nodes import POLL_SECONDS, ClusterLost, NodeWatch, death_words, node_name
from .worker_plan import plan_workers, resources_in_words
from .workers_status import default_status_path, worker_entry, write_status

MAX_KILLS = 3              # workers one question may take down before the run stops
START_SECONDS = 600        # a worker Ray has not started by then (the cluster lacks room) stops the run


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


def _kill(handle) -> None:
    """End a worker; one that is gone already (with its node, say) is not an error."""
    import ray

    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


class Fleet:
    """Ray workers of one profile, and the driver's side of them (`map`)."""

    def __init__(self, cfg, workers: int | str | None = None, *, loader: Callable | None = None,
                 searcher=None, status_path: str | Path | bool | None = None, num_cpus: int | None = None):
        import ray

        if workers is not None:                   # instead of runner.workers (tests, the benchmark)
            cfg = cfg.with_overrides({"runner.workers": workers})
        self.cfg = cfg
        self._owns_ray = connect(cfg, num_cpus)
        self._slots: dict[int, dict] = {}
        self._stopped: ClusterLost | None = None  # the cluster is lost: close asks Ray nothing more
        try:
            resources = ray.cluster_resources()
            self.size, self.resources = plan_workers(cfg, resources)
            self._watch = NodeWatch()
        except BaseException:
            self._leave()
            raise
        per_worker = int(cfg.get("runner.concurrency", 1) or 1)
        from .ray_worker import Worker
        self._cls = ray.remote(Worker).options(
            max_restarts=0, max_concurrency=max(1, per_worker), **self.resources)
        # the workers' disk-full paragraph names this run's resume command and estimate
        self._args = (cfg, loader, searcher, disk_full.current().for_another_process())
        # status_path None: results/<profile>/workers.json; False: none (preflight's survey)
        self._status_path = (None if status_path is False else
                             Path(status_path) if status_path else default_status_path(cfg))
        self._kills: dict[str, int] = {}
        self._lost: set[tuple[int, int]] = set()  # (slot, generation) of workers gone with a node
        self._loop: dict | None = None            # the `map` under way: what a stop says is kept
        try:
            for slot in range(self.size):
                self._start(slot)
            self._await_infos()
        except BaseException:
            self.close()
            raise
        self._write_status(force=True)

    # -- workers -------------------------------------------------------------------------------
    def _start(self, slot: int) -> None:
        old = self._slots.get(slot, {})
        handle = self._cls.remote(*self._args)
        self._slots[slot] = {"handle": handle, "generation": old.get("generation", -1) + 1,
                             "restarts": old.get("restarts", -1) + 1, "answered": old.get("answered", 0),
                             "in_flight": {}, "info": None, "info_ref": handle.info.remote(),
                             "failed_starts": old.get("failed_starts", 0), "gone": None,
                             "since": time.monotonic(), "dead_seen": len(self._watch.dead),
                             # where the worker it replaces ran: a worker that died with its node
                             # is often replaced before Ray marks the node dead
                             "last_node": (old.get("info") or {}).get("node", old.get("last_node"))}

    def _live(self) -> list[int]:
        """The slots whose worker is running or starting (not gone with its node)."""
        return [slot for slot, w in self._slots.items() if not w["gone"]]

    def _start_error(self, slot: int, timeout: float) -> UserError:
        return UserError(f"Ray could not start worker {slot} within {timeout:.0f} s (each asks for "
                         f"{resources_in_words(self.resources)})", setting="runner.workers",
                         fix="check `ray status`: the cluster may lack those resources; lower runner.workers")

    def _await_infos(self, timeout: float = START_SECONDS) -> None:
        """Wait until every live worker's `info` came back; its own error or a timeout closes the fleet."""
        import ray

        deadline = time.monotonic() + timeout
        while True:
            waiting = {w["info_ref"]: slot for slot, w in self._slots.items()
                       if not w["gone"] and w["info"] is None}
            if not waiting:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise self._start_error(next(iter(waiting.values())), timeout) from None
            ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=min(POLL_SECONDS, left))
            for ref in ready:
                slot = waiting[ref]
                w = self._slots[slot]
                if w["info_ref"] is not ref:        # replaced meanwhile
                    continue
                try:
                    w["info"] = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - re-raised as the worker's own error
                    if isinstance(err, _faults()) and self._lost_while_starting(slot):
                        continue
                    self.close()
                    raise _unwrap(err) from None
                w["info_ref"] = None
            self._check()

    def _started(self, slot: int) -> bool:
        """Whether the worker in `slot` is up (its `info` came back), without waiting."""
        import ray

        w = self._slots[slot]
        if w["gone"]:
            return False
        if w["info"] is not None:
            return True
        if not ray.wait([w["info_ref"]], timeout=0)[0]:
            return False
        try:
            w["info"] = ray.get(w["info_ref"])
        except _faults() as err:
            if self._lost_while_starting(slot):
                return False
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

    def pids(self) -> dict[int, int]:
        """{slot: process id} of the live workers (the kill test stops one by its id)."""
        self._await_infos()
        return {slot: self._slots[slot]["info"]["pid"] for slot in self._live()}

    def infos(self) -> list[dict]:
        self._await_infos()
        return [dict(self._slots[slot]["info"], slot=slot) for slot in self._live()]

    def _get(self, ref) -> Any:
        """`ray.get(ref)`, checking for dead nodes between waits (`_check`)."""
        import ray

        while not ray.wait([ref], timeout=POLL_SECONDS)[0]:
            self._check()
        return ray.get(ref)

    def call(self, name: str, *args) -> Any:
        """One request to one live worker (describe, method_info), retried on another when it dies."""
        kills = 0
        while True:
            slot = self._live()[0]                # _check raises before none is left
            w = self._slots[slot]
            try:
                return self._get(getattr(w["handle"], name).remote(*args))
            except _faults():
                self._check(now=True)
                if (slot, w["generation"]) in self._lost:      # gone with its node: not its fault
                    continue
                kills += 1
                if kills >= MAX_KILLS:
                    raise UserError(f"Ray workers kept dying while answering {name}", setting="runner.workers",
                                    fix="see the workers' logs (/tmp/ray/session_latest/logs) for why") from None
                self._replace(slot, w["generation"])
            except Exception as err:  # noqa: BLE001 - the worker's own error
                raise _unwrap(err) from None

    def warm(self, model: str | None = None, cached: bool = True) -> None:
        """Every worker loads `model` now, side by side, rather than on its first question."""
        refs = {slot: (self._slots[slot]["generation"], self._slots[slot]["handle"].describe.remote(model, cached))
                for slot in self._live()}
        for slot, (generation, ref) in refs.items():
            try:
                self._get(ref)
            except _faults():
                self._check(now=True)
                if (slot, generation) not in self._lost:
                    self._replace(slot, generation)
            except Exception as err:  # noqa: BLE001 - the worker's own error
                raise _unwrap(err) from None

    def _replace(self, slot: int, generation: int) -> None:
        """Start a fresh worker in `slot` unless that already happened for this generation."""
        w = self._slots[slot]
        if w["generation"] != generation:
            return
        _kill(w["handle"])
        self._start(slot)

    # -- lost nodes ----------------------------------------------------------------------------
    def _check(self, now: bool = False) -> None:
        """Ask Ray which nodes died (`NodeWatch`); their workers are moved (`_move`), the loss said once.
        ClusterLost when the driver's node, the head or every worker is gone."""
        try:
            found = self._watch.check(now)
        except ClusterLost as err:
            raise self._stop(err) from None
        for node in found:
            on = [slot for slot in self._live() if self._node_of(slot) == node["NodeID"]]
            moved = [slot for slot in on if self._move(slot)]
            live = len(self._live())
            say(f"[ray] node {node_name(node)} died (Ray: {death_words(node)}): "
                + (f"worker {on[0]} went with it and its questions go to the others; " if len(on) == 1 else
                   f"workers {', '.join(map(str, on))} went with it and their questions go to the others; "
                   if on else "no worker of this run runs there now; ")
                + f"the run goes on with {live} worker{'s' if live != 1 else ''}"
                + (f" ({len(moved)} starting again where the cluster has room)" if moved else "")
                + (f", not the {self.size} it started with" if live < self.size else ""))
        self._need_workers()

    def _node_of(self, slot: int) -> str | None:
        """Its worker's node; one still starting: the replaced worker's (Ray does not say where)."""
        w = self._slots[slot]
        return w["info"]["node"] if w["info"] else w["last_node"]

    def _move(self, slot: int) -> bool:
        """The worker in `slot` went with its node: start another where there is room (True), else drop it."""
        import ray

        w = self._slots[slot]
        self._lost.add((slot, w["generation"]))
        free = ray.available_resources()
        if all(free.get(key, 0.0) + 1e-9 >= need for key, need in
               (("GPU", self.resources.get("num_gpus", 0)), ("CPU", self.resources.get("num_cpus", 0))) if need):
            self._replace(slot, w["generation"])
            return True
        w["gone"], w["info_ref"] = "its node died", None
        w["in_flight"].clear()
        _kill(w["handle"])                 # gone already if it went with its node
        return False

    def _lost_while_starting(self, slot: int) -> bool:
        """Whether the worker in `slot`, dead before it started, may have gone with a node that died
        since (Ray does not say where it was placed); if so it is moved and its start not counted."""
        w = self._slots[slot]
        self._check(now=True)
        if len(self._watch.dead) <= w["dead_seen"]:
            return False
        self._move(slot)
        self._need_workers()
        return True

    def _need_workers(self) -> None:
        if not self._live():
            raise self._stop(ClusterLost(
                "every worker of this run went with its node, and the cluster has no room for "
                f"another (each asks for {resources_in_words(self.resources)})")) from None

    def _stop(self, err: ClusterLost) -> ClusterLost:
        """The run ends on `err`: the loop's progress goes into its paragraph, the stop is recorded."""
        if self._stopped is None:
            loop = self._loop
            if loop is not None:
                err.progress(loop["done"] + loop["yielded"], loop["total"], loop["file"])
            err.record_stop()
            self._stopped = err
        return err

    # -- the loop ------------------------------------------------------------------------------
    def map(self, tasks: Iterable[tuple[str, tuple]], per_worker: int = 1, done: int = 0,
            file: str | Path | None = None) -> Iterator[tuple[str, Any]]:
        """Yield (key, result) for every (key, task) as workers finish them, each key once, with
        `per_worker` tasks in flight on each worker. A dead worker is replaced and its tasks go to
        the front of the queue. On a task's own error nothing new starts; the running tasks finish
        and the error is raised. `done`, `file`: this loop's questions already in its file, and the
        file, for the paragraph of a lost cluster."""
        import ray

        queue = deque(tasks)
        inflight: dict[Any, tuple[int, int, str, tuple]] = {}
        self._loop = {"done": done, "total": done + len(queue), "file": file, "yielded": 0}
        seen: set[str] = set()
        error: BaseException | None = None
        per_worker = max(1, int(per_worker or 1))
        try:
            while queue or inflight:
                for slot in self._live():
                    w = self._slots[slot]
                    # a worker still starting (a replacement waiting for a free GPU) gets nothing
                    while (queue and error is None and len(w["in_flight"]) < per_worker
                           and self._started(slot)):
                        key, task = queue.popleft()
                        ref = w["handle"].run.remote(task)
                        inflight[ref] = (slot, w["generation"], key, task)
                        w["in_flight"][ref] = key
                self._requeue_lost(inflight, queue)
                self._write_status()
                starting = {self._slots[s]["info_ref"]: s for s in self._live()
                            if self._slots[s]["info_ref"] is not None}
                if not inflight and not (queue and error is None and starting):
                    break
                if not inflight and all(time.monotonic() - self._slots[s]["since"] > START_SECONDS
                                        for s in starting.values()):
                    raise self._start_error(next(iter(starting.values())), START_SECONDS)
                ready, _ = ray.wait(list(inflight) + list(starting), num_returns=1, timeout=POLL_SECONDS)
                for ref in ready:
                    if ref not in inflight:          # a worker has started (or was re-queued)
                        continue
                    slot, generation, key, task = inflight.pop(ref)
                    w = self._slots[slot]
                    w["in_flight"].pop(ref, None)
                    try:
                        result = ray.get(ref)
                    except _faults():
                        self._check(now=True)
                        if (slot, generation) in self._lost:     # gone with its node: not the question's doing
                            queue.appendleft((key, task))
                            self._requeue_lost(inflight, queue)
                            continue
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
                    self._loop["yielded"] += 1
                    yield key, result
                self._check()
                self._requeue_lost(inflight, queue)
        finally:
            self._loop = None
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

    def _requeue_lost(self, inflight: dict, queue: deque) -> None:
        """The tasks of workers gone with their nodes go back to the queue."""
        for slot, generation in {(s, g) for s, g, _, _ in inflight.values()} & self._lost:
            self._requeue_dead(slot, generation, inflight, queue)

    # -- status --------------------------------------------------------------------------------
    _last_status = 0.0

    def _write_status(self, force: bool = False) -> None:
        if self._status_path is None or (not force and time.time() - self._last_status < 2.0):
            return
        self._last_status = time.time()
        workers = [worker_entry(slot, w["info"] or {}, w["answered"], w["in_flight"].values(), w["restarts"],
                                w["gone"]) for slot, w in sorted(self._slots.items())]
        write_status(self._status_path, self.cfg.get("runner.ray_address", "local"), self.resources, workers)

    # -- the end -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the workers; leave the cluster if this joined it (a lost one is asked nothing)."""
        for w in self._slots.values() if self._stopped is None else ():
            _kill(w["handle"])
        self._slots.clear()
        if self._status_path is not None and self._status_path.is_file():
            self._status_path.unlink()
        self._leave()

    def _leave(self) -> None:
        if self._owns_ray:
            import ray
            ray.shutdown()
            self._owns_ray = False

    def backend(self, model: str | None = None, cached: bool = True, dtype: str | None = None) -> FleetBackend:
        return FleetBackend(self, model, cached, dtype)


def survey(cfg) -> tuple[int, dict, list[dict] | None]:
    """(workers, Ray resources of each, each worker's `Worker.info`) for preflight: a cluster to join
    is joined and its workers started without a model; `local` plans against this machine's GPUs
    and CPUs without starting anything (infos None)."""
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
