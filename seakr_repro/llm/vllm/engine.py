"""The vLLM engine thread: calls from any number of threads queue their requests, which join the
running batch at the next step, so concurrent questions share every forward pass."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from . import worker as vllm_worker

@dataclass
class _Job:
    """Requests of one caller; `done` is set when all have finished (or the engine failed)."""
    n: int
    results: list = field(default_factory=list)
    left: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self.results = [None] * self.n
        self.left = self.n


class EngineThread:
    """The only thread that touches the engine: adds queued requests, steps, hands out results."""

    def __init__(self, llm):
        self.llm = llm
        self.cv = threading.Condition()
        self.queue: list[tuple] = []          # ("requests", prompts, params, tags, score, job) | ("task", fn)
        self.owner: dict[str, tuple[_Job, int, str | None]] = {}
        self.score: dict[str, tuple[int, list[int]]] = {}
        self.thread: threading.Thread | None = None

    def run(self, prompts: list, params: list, tags: list[str | None],
            score: dict | None = None) -> list[tuple[Any, dict]]:
        """Requests of one caller -> [(RequestOutput, captures)] in their order (blocking)."""
        if not prompts:
            return []
        job = _Job(len(prompts))
        self._submit(("requests", prompts, params, tags, score or {}, job))
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.results

    def call(self, fn, *args) -> list:
        """Run an RPC on the workers from the engine thread, between steps."""
        return self.call_llm(lambda llm: llm.collective_rpc(fn, args=args))

    def call_llm(self, fn):
        """Run fn(llm) on the engine thread, between steps (blocking)."""
        box: dict = {}
        done = threading.Event()

        def task():
            try:
                box["out"] = fn(self.llm)
            except BaseException as e:  # handed to the caller
                box["err"] = e
            done.set()

        self._submit(("task", task))
        done.wait()
        if "err" in box:
            raise box["err"]
        return box["out"]

    def stop(self, timeout: float = 60.0) -> None:
        """End the engine thread (callers still waiting get an error) and drop the engine."""
        with self.cv:
            self.queue.append(("stop",))
            self.cv.notify()
            thread = self.thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)
        self.llm = None

    def _submit(self, item: tuple) -> None:
        with self.cv:
            self.queue.append(item)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="seakr-vllm-engine",
                                               daemon=True)
                self.thread.start()
            self.cv.notify()

    def _add(self, prompts, params, tags, score, job) -> None:
        try:
            ids = self.llm.enqueue(prompts, params, use_tqdm=False)
        except Exception as e:   # a refused request fails its caller only
            job.error = e
            job.done.set()
            return
        for j, (rid, tag) in enumerate(zip(ids, tags)):
            # enqueue returns the engine's id ("<counter>-<random>"); outputs carry the counter
            # the LLM class gave the request
            self.owner[str(rid).split("-", 1)[0]] = (job, j, tag)
            if tag in score:
                self.score[tag] = score[tag]

    def _step(self) -> None:
        finished = [o for o in self.llm.llm_engine.step() if o.finished]
        tags = [t for t in (self.owner[o.request_id][2] for o in finished) if t]
        caps: dict = {}
        if tags:
            score = {t: self.score.pop(t) for t in tags if t in self.score}
            caps = combine(self.llm.collective_rpc(vllm_worker.fetch, args=(tags, score)))
        for o in finished:
            job, j, tag = self.owner.pop(o.request_id)
            job.results[j] = (o, caps.get(tag, {}) if tag else {})
            job.left -= 1
            if job.left == 0:
                job.done.set()

    def _loop(self) -> None:
        engine = self.llm.llm_engine
        while True:
            with self.cv:
                while not self.queue and not self.owner:
                    self.cv.wait()
                batch, self.queue = self.queue, []
            if any(item[0] == "stop" for item in batch):
                for item in batch:           # a queued task's caller waits for it: run it
                    if item[0] == "task":
                        item[1]()
                self._fail([b[5] for b in batch if b[0] == "requests"],
                           RuntimeError("the vLLM backend was closed"))
                return
            try:
                for item in batch:
                    if item[0] == "task":
                        item[1]()
                    else:
                        self._add(*item[1:])
                if self.owner:
                    self._step()
            except BaseException as e:   # fail every waiting caller, keep the thread alive
                self._fail([b[5] for b in batch if b[0] == "requests"], e)
                try:
                    engine.abort_request(list(engine.output_processor.request_states), internal=True)
                except Exception:
                    pass

    def _fail(self, queued: list, error: BaseException) -> None:
        """Hand `error` to every caller in flight and to the `queued` jobs."""
        jobs = {id(j): j for j, _, _ in self.owner.values()}
        jobs.update({id(j): j for j in queued})
        self.owner.clear()
        self.score.clear()
        for job in jobs.values():
            job.error = error
            job.done.set()


def combine(per_worker: list[dict]) -> dict:
    """Worker 0's captures (whole there), DRAGIN's attention averaged over every worker's heads."""
    caps = per_worker[0]
    for tag, item in caps.items():
        if "attention" in item:
            parts = [w[tag]["attention"] for w in per_worker if "attention" in w.get(tag, {})]
            item["attention"] = (sum(p[0] for p in parts) / sum(p[1] for p in parts)).tolist()
        if "rows" in item:
            parts = [w[tag]["rows"] for w in per_worker if "rows" in w.get(tag, {})]
            heads = sum(p[1] for p in parts)
            item["rows"] = {pos: (sum(p[0][pos] for p in parts) / heads).tolist() for pos in parts[0][0]}
    return caps
