"""How the benchmarks time things: each function warmed up once, then repeated; two or more
functions called in turn, so that the load of a shared machine falls on all of them alike."""
from __future__ import annotations

import time


def timed(fn, repeats: int) -> tuple[list[float], object]:
    """Seconds of each of `repeats` calls of `fn` (after one warm-up call: allocator, kernels,
    tokenizer caches) and the last call's result."""
    fn()
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times, result


def alternate(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of each function, called in turn (after one warm-up each); each function returns
    the seconds it measured itself, so that it can leave its set-up out of the clock."""
    for f in fns.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            times[k].append(f())
    return times
