"""The card's memory in the rehearsal: the cap each part runs under, and how much of the card is in
use beyond torch's own reserved memory, sampled in the background through each part, its child
processes included.

The cap: the paper profile's card is 24 GB, lent machines have larger ones (an 80 GB H100, a
141 GB H200), so each process of a part caps torch's allocator with
`torch.cuda.set_per_process_memory_fraction` (what torch allows itself, not what the card has). A
real 24 GiB card also holds the CUDA context and the libraries' modules outside torch's allocator,
so the cap given to torch is the cap minus what is outside torch when the process starts.

Outside torch: a reading of the whole card (`read_card`: NVML, else `nvidia-smi`; both see every
process and need no CUDA context in the reader) minus what was in use before the part's process
touched the card (`CardSampler.take_baseline`: the driver's reserve, where the reading counts it,
and other tenants) and minus the torch reserved memory of every live process of the part. NVML is
read through its v2 memory query where the driver offers it: v1's `used` counts the memory the
driver reserves (0.5-0.9 GiB on an idle card), v2's does not (it reports it as `reserved`).
The part's own process reads its own torch memory; a child process that uses the card
(gpu_tests' pytest, the ray part's worker) reports its own to a side file, `<folder>/<pid>.json`,
every half second (`join_part` starts that reporter; the part's process passes the folder and the
cap down in the environment). The CUDA contexts are in what is left (each process on the card has
one); much more is another process, or a library that took the card behind torch's back (JAX
preallocates 75% of a card at its first use unless told not to: core/jax_env.py).

Where the card's reader lists the processes on the card (and their ids are ours), the measure is
per process: the most one process holds beyond its own torch (its CUDA context and whatever a
library took behind torch's back), or what no process accounts for, so a part of several
processes (the ray part's own and its worker's) does not add up their contexts; else it is the
card's use beyond all of the part's torch, shared out among the part's processes that hold torch
memory (each has a context of its own; `outside_torch`).

On a CPU under a simulated card (doubles/simulated_card.py, `active()`), the reader, the torch
memory, the cap and `mem_get_info` are the simulated card's, so these checks run without a GPU.

A reading and a child's report are not taken at the same instant: a child that has just reserved
more shows as outside torch for up to one interval. So a part's `worst` is the largest amount that
held for two samples in a row (`instant_max` is the largest single one). At its end a part waits
for the card to settle (`CardSampler.settle`), so memory a child frees as it exits is not counted
as held.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.device import cuda_available
from ..core.io import write_json
from ..core.processes import alive
from ..doubles import SIMULATED_CARD_ENV

GiB = 2**30
MiB = 2**20
MEMORY_CAP_GIB = 24.0           # the paper profile's card: every part runs under it unless told otherwise
# what a part's process hands its children (the pytest child, a Ray worker): where to report their
# torch reserved memory, and the cap to apply
TORCH_DIR_ENV = "SEAKR_REHEARSAL_TORCH_DIR"
CAP_ENV = "SEAKR_REHEARSAL_CAP_GIB"
INTERVAL_S = 0.5


@dataclass
class CardReading:
    """The whole card at one moment: bytes in use (every process), the card's size, and what
    each process holds where the reader can tell (empty where it cannot, e.g. in a container
    whose processes the driver does not list)."""
    used: int
    total: int
    processes: dict[int, int] = field(default_factory=dict)
    source: str = ""
    reserved: int | None = None      # the driver's reserve, where the reading leaves it out of `used`


def simulated():
    """The simulated card active in this process, or None. Read from the imported modules: a
    process that never imported doubles.simulated_card has none (and this module stays free of
    torch, which the driver and the reporter threads do not import)."""
    module = sys.modules.get(__name__.rsplit(".", 2)[0] + ".doubles.simulated_card")
    return None if module is None else module.active()


def join_simulated_card() -> None:
    """Put this process on the simulated card its environment names (SIMULATED_CARD_ENV: a part's
    process and its children on a CPU's rehearsal), unless it is on one already."""
    if os.environ.get(SIMULATED_CARD_ENV) and simulated() is None:
        from ..doubles.simulated_card import activate_from_env

        activate_from_env()


def _cuda() -> bool:
    return cuda_available() or simulated() is not None


def _nvml(index: int, pynvml=None) -> CardReading | None:
    if pynvml is None:
        try:
            import pynvml
        except ImportError:
            return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem, source = None, "nvml v1"
        if hasattr(pynvml, "nvmlMemory_v2"):
            try:
                mem, source = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2), "nvml v2"
            except (pynvml.NVMLError, TypeError):       # a driver (or binding) without the v2 query
                mem = None
        if mem is None:
            mem, source = pynvml.nvmlDeviceGetMemoryInfo(handle), "nvml v1"
        procs = {int(p.pid): int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    except pynvml.NVMLError:
        return None
    return CardReading(int(mem.used), int(mem.total), procs, source, getattr(mem, "reserved", None))


def _nvidia_smi(index: int) -> CardReading | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None

    def query(*args: str) -> list[list[str]]:
        out = subprocess.run([exe, "-i", str(index), *args, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    try:
        (used, total), = query("--query-gpu=memory.used,memory.total")
        procs = {int(p): int(m) * MiB for p, m in query("--query-compute-apps=pid,used_memory")
                 if p.isdigit() and m.isdigit()}
        return CardReading(int(used) * MiB, int(total) * MiB, procs, "nvidia-smi")
    except (ValueError, OSError, subprocess.SubprocessError):
        return None


def read_simulated(index: int = 0) -> CardReading | None:
    """The simulated card's memory now, read as NVML (a CPU's rehearsal under one), else None."""
    card = simulated()
    return None if card is None else _nvml(index, card.pynvml())


def read_card(index: int = 0) -> CardReading | None:
    """The card's memory now (NVML, else nvidia-smi; a simulated card's where one is active);
    None where neither can read a GPU."""
    if simulated() is not None:
        return read_simulated(index)
    return _nvml(index) or _nvidia_smi(index)


def own_torch_reserved() -> int:
    """This process's torch reserved bytes on the card (0 where torch has not touched CUDA)."""
    card = simulated()
    if card is not None:
        return card.reserved
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return 0
        return int(torch.cuda.memory_reserved())
    except AttributeError:          # torch half-imported by another thread: it holds nothing yet
        return 0


def outside_torch_bytes() -> int | None:
    """Bytes of the card in use beyond this process's torch reserved memory, as this process's
    CUDA context sees the card (None without CUDA)."""
    if not _cuda():
        return None
    card = simulated()
    if card is not None:
        free, total = card.mem_get_info()
        return int(total - free - card.reserved)
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free - torch.cuda.memory_reserved())


def apply_cap(cap_gib: float | None) -> dict:
    """Cap torch's allocator so this process has what a `cap_gib` card would leave it; returns
    what the report says about it."""
    if cap_gib is None:
        return {"cap_gib": None, "applied": False, "why": "no cap asked (--memory-cap-gib none)"}
    if not _cuda():
        return {"cap_gib": cap_gib, "applied": False, "why": "no CUDA GPU: nothing to cap"}
    card = simulated()
    if card is not None:
        total = card.total
    else:
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
    outside = outside_torch_bytes()        # the CUDA context, made by mem_get_info if not before
    out = {"cap_gib": cap_gib, "card_gib": round(total / GiB, 2), "outside_torch_at_start_gib": round(outside / GiB, 2)}
    if cap_gib * GiB >= total:
        return {**out, "applied": False, "why": f"the card has {total / GiB:.1f} GiB, not more than the cap"}
    fraction = max(0.0, cap_gib * GiB - outside) / total
    if card is not None:
        card.cap = int(fraction * total)
    else:
        torch.cuda.set_per_process_memory_fraction(fraction)
    return {**out, "applied": True, **({"simulated": True} if card is not None else {}),
            "torch_fraction": round(fraction, 4), "torch_may_use_gib": round(fraction * total / GiB, 2)}


# ------------------------------------------------------------------ each process's own report
def report_torch_reserved(folder: Path, reserved: Callable[[], int] = own_torch_reserved,
                          interval: float = INTERVAL_S) -> threading.Thread:
    """Write this process's torch reserved bytes to `folder/<pid>.json` every `interval` seconds
    (a daemon thread; the file goes when the process exits normally)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{os.getpid()}.json"

    def loop() -> None:
        while True:
            try:
                write_json(path, {"pid": os.getpid(), "reserved": int(reserved()), "t": time.time()}, indent=None)
            except Exception as e:      # noqa: BLE001  (the process's work goes on; the sampler sees no report)
                print(f"[rehearsal] torch memory report failed: {type(e).__name__}: {e}", file=sys.stderr)
                return
            time.sleep(interval)

    atexit.register(lambda: path.unlink(missing_ok=True))
    thread = threading.Thread(target=loop, name="torch-reserved-report", daemon=True)
    thread.start()
    return thread


_joined: dict = {}


def join_part(cap_gib: float | None | str = "env", folder: str | Path | None = "env") -> dict:
    """What a child process of a part does once: apply the part's cap to its own torch (where it
    has a GPU) and report its torch reserved memory to the part's folder. "env" takes each from
    the environment the part's process set; None leaves it out. Returns the cap's record."""
    if _joined:
        return _joined["cap"]
    join_simulated_card()
    if cap_gib == "env":
        text = os.environ.get(CAP_ENV)
        cap_gib = float(text) if text else None
    if folder == "env":
        folder = os.environ.get(TORCH_DIR_ENV) or None
    _joined["cap"] = apply_cap(cap_gib) if cap_gib is not None else {"cap_gib": None, "applied": False}
    if folder:
        report_torch_reserved(Path(folder))
    return _joined["cap"]


def children_reserved(folder: Path | None, own_pid: int) -> dict[int, int]:
    """{pid: torch reserved bytes} that the part's live child processes last reported."""
    out: dict[int, int] = {}
    if folder is None or not Path(folder).is_dir():
        return out
    for path in Path(folder).glob("*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):       # being replaced right now: the next sample reads it
            continue
        pid = int(doc.get("pid", 0))
        if pid and pid != own_pid and alive(pid):
            out[pid] = int(doc.get("reserved", 0))
    return out


def outside_torch(reading: CardReading, reserved: dict[int, int],
                  before: CardReading | None = None) -> tuple[int, str, int]:
    """(outside torch, its basis, everything beyond torch) of one reading, given the torch reserved
    bytes of the part's processes and the reading `before` the part touched the card (what it held
    then is not the part's: the driver's reserve where the reading counts it, other tenants).
    Where the reading lists the processes on the card and they are ours (the pids match: not so in
    a container that hides them), the measure is per process: the most any one process holds
    beyond its torch (its CUDA context, and anything a library took behind torch's back), or what
    no process accounts for, whichever is larger; so the part's processes' contexts are not summed.
    Else the card's: all of its use beyond the part's torch, shared out among the part's processes
    that hold torch memory (each has its own context; the reading cannot tell them apart)."""
    before = before or CardReading(0, reading.total)
    total = reading.used - before.used - sum(reserved.values())
    if not set(reading.processes) & set(reserved):
        holders = max(1, sum(1 for b in reserved.values() if b > 0))
        return total // holders, "card", total
    per_process = [used - before.processes.get(pid, 0) - reserved.get(pid, 0)
                   for pid, used in reading.processes.items()]
    unlisted = (reading.used - sum(reading.processes.values())) - (before.used - sum(before.processes.values()))
    return max(*per_process, unlisted), "per process", total


# ------------------------------------------------------------------ the part's sampler
class CardSampler:
    """The card's use outside torch through one part: sampled every `interval` seconds in a
    background thread (`start`), and where the part asks (`sample(where)`: after each model,
    method, question); `settle` at its end. `read` gives a `CardReading` or None (no GPU: nothing
    is sampled); `own_reserved` this process's torch reserved bytes; `folder` holds the children's
    reports. Both are injectable, so a test on a CPU drives it with a fake card."""

    def __init__(self, read: Callable[[], CardReading | None] = read_card, folder: Path | None = None,
                 own_reserved: Callable[[], int] = own_torch_reserved, interval: float = INTERVAL_S):
        self.read, self.folder, self.own_reserved, self.interval = read, folder, own_reserved, interval
        self.where = "start"
        self.before: CardReading | None = None      # the card before the part touched it
        self.samples = 0
        self.last: dict | None = None
        self.instant_max: dict | None = None
        self.worst: dict | None = None          # the largest value held for two samples in a row
        self.end: dict | None = None
        self.source: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "CardSampler":
        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.sample()
                except Exception:               # noqa: BLE001  (a reading that breaks must not end the part)
                    return
        self._thread = threading.Thread(target=loop, name="card-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def take_baseline(self) -> CardReading | None:
        """Read the card before the part's process makes its CUDA context: what is in use then is
        not the part's (every later sample subtracts it)."""
        self.before = self.read()
        return self.before

    def sample(self, where: str | None = None) -> dict | None:
        """One sample now (and, with `where`, the label of this and the later ones)."""
        with self._lock:
            if where is not None:
                self.where = where
            reading = self.read()
            if reading is None:
                return None
            own = int(self.own_reserved())
            children = children_reserved(self.folder, os.getpid())
            outside, basis, total = outside_torch(reading, {os.getpid(): own, **children}, self.before)
            got = {"outside": outside, "basis": basis, "total": total, "where": self.where, "used": reading.used,
                   "reserved": reading.reserved,
                   "own": own, "children": children, "processes": dict(reading.processes)}
            self.samples += 1
            self.source = reading.source
            if self.instant_max is None or outside > self.instant_max["outside"]:
                self.instant_max = got
            if self.last is not None:
                held = dict(got, outside=min(outside, self.last["outside"]))
                if self.worst is None or held["outside"] > self.worst["outside"]:
                    self.worst = held
            self.last = got
            return got

    def settle(self, timeout: float = 15.0, tolerance: int = 64 * MiB) -> dict | None:
        """Sample until two readings in a row agree within `tolerance` (what a child frees as it
        exits is gone by then), at most `timeout` seconds; that reading is the part's end."""
        self.stop()
        first = self.sample("end")
        if first is None:
            return None
        deadline = time.monotonic() + timeout
        prev = first
        while time.monotonic() < deadline:
            time.sleep(self.interval)
            now = self.sample("end")
            if abs(now["used"] - prev["used"]) <= tolerance:
                break
            prev = now
        self.end = self.last
        return self.end

    def report(self) -> dict:
        if not self.samples:
            return {"outside_torch_gib": None,
                    "outside_torch_why": "no reading of a GPU card (no NVML, no nvidia-smi, or --device cpu)"}
        gib = lambda n: round(n / GiB, 2)                   # noqa: E731
        worst = self.worst or self.last
        at = {"card_used_gib": gib(worst["used"]), "own_torch_reserved_gib": gib(worst["own"]),
              "children_torch_reserved_gib": {str(p): gib(b) for p, b in worst["children"].items()},
              "processes_gib": {str(p): gib(b) for p, b in worst["processes"].items()}}
        end = self.end or self.last
        before = {"before_part_gib": None if self.before is None else gib(self.before.used),
                  "driver_reserved_gib": None if self.last.get("reserved") is None else gib(self.last["reserved"])}
        return {"outside_torch_gib": {"worst": gib(worst["outside"]), "worst_at": worst["where"], **before,
                                      "basis": worst["basis"], "all_beyond_torch_at_worst": gib(worst["total"]),
                                      "instant_max": gib(self.instant_max["outside"]),
                                      "instant_max_at": self.instant_max["where"],
                                      "end": gib(end["outside"]), "samples": self.samples,
                                      "reading": self.source, "at_worst": at}}
