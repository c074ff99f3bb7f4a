"""The rehearsal's parts, one module each, and the one table the driver and a part's process
dispatch through. Each module's `run(ctx)` (ctx: child.PartRun) returns what the part found; it
never sets a status (verdicts.judge does, from that alone).

`imports`: what a part's process imports before its work (import_lists.py), timed on its own (the
report's `phases`: process start, import, model build, work; plan.py's estimates are split the
same way, and `python -m seakr_repro.rehearsal.cold_start` times the same lists in fresh
processes)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..import_lists import MODEL, PIPELINE, TORCH
from . import decode_bench, env, gpu_check, gpu_tests, methods, oom, ray, seakr_paper

@dataclass(frozen=True)
class Part:
    run: Callable[..., dict]
    # False where the part's work runs in child processes (each takes the cap itself) and the
    # part's own process need not hold a CUDA context
    torch_in_process: bool = True
    imports: tuple[str, ...] = ()


PARTS = {
    "env": Part(env.run, imports=TORCH),
    "gpu_tests": Part(gpu_tests.run, torch_in_process=False),
    "decode_bench": Part(decode_bench.run, imports=MODEL + ("seakr_repro.benchmarks.decode",)),
    "methods": Part(methods.run, imports=PIPELINE),
    "oom": Part(oom.run, imports=MODEL),
    "ray": Part(ray.run, imports=PIPELINE),
    "seakr_paper": Part(seakr_paper.run, imports=PIPELINE),
    "gpu_check": Part(gpu_check.run, imports=MODEL),
}
