"""Running independent LLM work at the same time, when the backend can batch it: the vLLM backend
(`concurrent = True`) puts every calling thread's requests into one running batch, so questions and
SeaKR's re-ranking candidates share each forward pass; under `llm.batching.ThreadBatcher`
(runner.concurrency > 1) the transformers backend merges the question threads' calls into its
multi-context calls. Threads start in a copy of the caller's context, so the per-question call
counter (`llm.cache.counting`) and the question's state (`Method.q`) follow the work into them."""
from __future__ import annotations

import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def supports_concurrency(backend) -> bool:
    """True when calls from several threads are safe and batched together."""
    return bool(getattr(backend, "concurrent", False))


def parallel_map(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """[fn(x) for x in items], on up to `workers` threads, results in the order of `items`."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as ex:
        futures = [ex.submit(contextvars.copy_context().run, fn, x) for x in items]
        return [f.result() for f in futures]
