"""The rehearsal's parts, one module each, and the one table the driver and a part's process
dispatch through. Each module's `run(ctx)` (ctx: child.PartRun) returns what the part found; it
never sets a status (verdicts.judge does, from that alone)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import decode_bench, env, gpu_check, gpu_tests, methods, oom, ray, seakr_paper


@dataclass(frozen=True)
class Part:
    run: Callable[..., dict]
    # False where the part's work runs in child processes (each takes the cap itself) and the
    # part's own process need not hold a CUDA context
    torch_in_process: bool = True


PARTS = {
    "env": Part(env.run),
    "gpu_tests": Part(gpu_tests.run, torch_in_process=False),
    "decode_bench": Part(decode_bench.run),
    "methods": Part(methods.run),
    "oom": Part(oom.run),
    "ray": Part(ray.run),
    "seakr_paper": Part(seakr_paper.run),
    "gpu_check": Part(gpu_check.run),
}
