"""CPU threads that keep a fair share of a busy machine.

OpenMP's default wait policy lets torch's intra-op threads spin while they wait for work; beside
other busy processes the spinning threads take turns with the threads that have work, and a
decode step slows far more than a fair share of the cores would explain (issue 28 measured 15x
beside five busy processes, where a fair share loses 3.5x). `OMP_WAIT_POLICY=PASSIVE` makes
waiting threads sleep, and a thread count that follows the cores this process may really use
(CPU affinity and the cgroup's CPU quota, not the machine's core count) keeps torch from starting
more threads than it will be scheduled on.

Both must be in the environment before the OpenMP runtime starts (the first torch, scikit-learn
or similar import), so `apply()` runs when `seakr_repro` is imported (the command line, every
notebook's first import, the tests), every child inherits it (papermill kernels, vLLM's engine),
and the Makefile exports the wait policy for processes that import torch first (`make lab`'s
kernels). A value the user already set in the environment always wins, which is why the kernel
spec carries none: jupyter_client lets a kernel spec's `env` override the user's.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

# How a waiting OpenMP thread waits (chosen by `make bench`'s contention benchmark, docs/speed.md).
WAIT_SETTING = {"OMP_WAIT_POLICY": "PASSIVE"}
# Any of these in the user's environment is their choice of waiting: the package then adds none.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
# torch's intra-op pool (and its MKL calls) size themselves from this one variable. MKL_NUM_THREADS is
# left alone: torch lets it win over OMP_NUM_THREADS, so setting it would overrule a user's own
# OMP_NUM_THREADS.
THREAD_VARIABLES = ("OMP_NUM_THREADS",)
CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def _quota_cpus(v2: Path = CGROUP_V2, v1: tuple[Path, Path] = CGROUP_V1) -> float | None:
    """The CPU quota of this process's cgroup in cores (None: no quota, or none readable)."""
    try:
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota, period = (int(p.read_text()) for p in v1)
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cpus(v2: Path = CGROUP_V2, v1: tuple[Path, Path] = CGROUP_V1) -> int:
    """Cores this process may run on: its CPU affinity, capped by its cgroup's quota (rounded up)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                   # not Linux
        cpus = os.cpu_count() or 1
    quota = _quota_cpus(v2, v1)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def fair_share_env(environ: dict | None = None, cpus: int | None = None) -> dict[str, str]:
    """The variables to add to `environ` (default: this process's): the wait setting, unless
    `environ` already says how to wait, and the thread counts where it does not set them."""
    environ = os.environ if environ is None else environ
    n = str(usable_cpus() if cpus is None else cpus)
    wait = {} if any(v in environ for v in WAIT_VARIABLES) else dict(WAIT_SETTING)
    return {**wait, **{v: n for v in THREAD_VARIABLES if v not in environ}}


def apply() -> dict[str, str]:
    """Put `fair_share_env()` into this process's environment (inherited by every child: papermill
    kernels, vLLM's engine, Ray workers); returns what it added. If torch is already imported its
    OpenMP runtime has started, so only the thread count can still change there."""
    added = fair_share_env()
    os.environ.update(added)
    torch = sys.modules.get("torch")
    if torch is not None and "OMP_NUM_THREADS" in added:
        torch.set_num_threads(int(added["OMP_NUM_THREADS"]))
    return added
