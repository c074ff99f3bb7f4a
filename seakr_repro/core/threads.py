"""CPU threads that keep a fair share of a busy machine (docs/speed.md, "A fair share of a busy
machine", has the measurements).

OMP_WAIT_POLICY=PASSIVE (waiting threads sleep instead of spinning) only when other tasks run as
the process starts, since sleeping costs when it runs alone; a thread count from the cores this
process may really use (affinity, cgroup quota). OpenMP reads both at start-up, so `apply()` runs
at `import seakr_repro`; a child that imports the package decides again, one that does not
inherits. A value the user set always wins, which is why the kernel spec carries none
(jupyter_client lets a kernel spec's `env` override the user's)."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

# No fixed wait setting met both floors of `bench contention` (docs/speed.md): spinning is fastest
# alone, sleeping keeps a fair share beside busy processes.
BUSY_SETTING = {"OMP_WAIT_POLICY": "PASSIVE"}
LOADAVG = Path("/proc/loadavg")
# The variables this package set in a parent process (a child decides again, as for its own start)
SET_BY_PACKAGE = "SEAKR_THREAD_VARIABLES"
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


def others_running(samples: int = 5, interval: float = 0.01, path: Path = LOADAVG) -> int | None:
    """Tasks running or waiting for a core besides this process, now: the least of a few reads of
    /proc/loadavg's running count (an instant figure; the load averages trail by a minute). None
    where it cannot be read."""
    import time

    least = None
    for i in range(samples):
        try:
            count = int(path.read_text().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return None
        least = count if least is None else min(least, count)
        if least <= 1 or i + 1 == samples:      # this process alone: the least can fall no further
            break
        time.sleep(interval)
    return max(0, least - 1)


def wait_setting(others: int | None) -> dict[str, str]:
    """PASSIVE when another task is running (or nothing can be read), else none: torch's own."""
    return dict(BUSY_SETTING) if others is None or others >= 1 else {}


def _set_by_package(environ) -> set[str]:
    """The variables a parent process of this package set (not the user's)."""
    return set(filter(None, environ.get(SET_BY_PACKAGE, "").split(",")))


def fair_share_env(environ: dict | None = None, cpus: int | None = None,
                   others: int | None = -1) -> dict[str, str]:
    """The variables to set in `environ` (default: this process's): the wait setting (`others`:
    tasks running besides this one, -1 = read them now), unless `environ` already says how to wait,
    and the thread counts where it does not set them. What a parent process of this package set is
    decided again, not taken for the user's."""
    environ = os.environ if environ is None else environ
    users = set(environ) - _set_by_package(environ)
    n = str(usable_cpus() if cpus is None else cpus)
    wait = {} if any(v in users for v in WAIT_VARIABLES) else \
        wait_setting(others_running() if others == -1 else others)
    return {**wait, **{v: n for v in THREAD_VARIABLES if v not in users}}


def apply() -> dict[str, str]:
    """Put `fair_share_env()` into this process's environment (inherited by every child: papermill
    kernels, vLLM's engine, Ray workers, which decide the wait setting again when they import the
    package); returns what it set. If torch is already imported its OpenMP runtime has started, so
    only the thread count can still change there."""
    added = fair_share_env()
    for stale in _set_by_package(os.environ) - set(added):          # a parent's PASSIVE on a machine now quiet
        os.environ.pop(stale, None)
    os.environ.update(added)
    os.environ[SET_BY_PACKAGE] = ",".join(sorted(added))
    torch = sys.modules.get("torch")
    if torch is not None and "OMP_NUM_THREADS" in added:
        torch.set_num_threads(int(added["OMP_NUM_THREADS"]))
    return added
