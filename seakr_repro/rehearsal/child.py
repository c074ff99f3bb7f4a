"""One part in a process of its own: what the driver spawns (`--child PART`).

The process caps torch at the call's card (card_memory.apply_cap), samples the card in the
background through the part (its own children included: they report their torch memory to the
part's folder and take the same cap, from the environment set here), runs the part, waits for the
card to settle, and writes its result file, `part-<name>.json`, in the call's folder. A part that
measures as it goes leaves what it has so far in `part-<name>.partial.json` (`PartRun.partial`):
the driver folds it into the report while the part runs, and keeps it when the part raises,
times out or is killed.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import resource
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..core.io import write_json
from . import card_memory
from .device import is_cuda
from .plan import Estimate, estimate


def partial_path(work: Path, part: str) -> Path:
    return Path(work) / f"part-{part}.partial.json"


def result_path(work: Path, part: str) -> Path:
    return Path(work) / f"part-{part}.json"


def read_partial(work: Path, part: str) -> dict | None:
    path = partial_path(work, part)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except ValueError:
        return None


@dataclass
class PartRun:
    """What a part's `run(ctx)` gets: the call's options (`opt`), the call's folder, its own time
    limit, the card's sampler (`watch`) and the cap it runs under (`card`)."""
    name: str
    opt: argparse.Namespace
    work: Path
    limit: float
    watch: card_memory.CardSampler
    card: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def device(self) -> str:
        return self.opt.device

    @property
    def shape(self) -> str:
        return self.opt.shape

    @property
    def paper_shape(self) -> bool:
        """LLaMA-2-7B's shape (on the GPU); else the tiny one (on a CPU)."""
        return self.opt.shape == "llama-2-7b"

    @property
    def estimate(self) -> Estimate:
        return estimate(self.name, self.shape)

    @property
    def partial_path(self) -> Path:
        return partial_path(self.work, self.name)

    def used(self) -> float:
        return time.monotonic() - self.started

    def partial(self, got: dict) -> None:
        """What the part measured so far: the report keeps it if the part does not finish."""
        write_json(self.partial_path, json.loads(json.dumps(got, default=str)), indent=1)


def simulate_the_card(device: str) -> tuple[dict[str, str], Callable[[], None]]:
    """Where no CUDA exists, what this process runs in place of the card's own, and why (the
    part's result says so under `simulated`): the graph decode path as the static step; and the
    function that puts the real one back (a part run inside a test's process leaves nothing)."""
    if is_cuda(device) or importlib.util.find_spec("torch") is None:    # no torch: the part says so itself
        return {}, lambda: None
    from ..doubles.simulated_graph import WHY, simulate_graph

    return {"graph": WHY}, simulate_graph()


@contextlib.contextmanager
def timed_builds(seconds: list[float]) -> Iterator[None]:
    """Every random-weight model built in this process (doubles.random_llama, which the parts, the
    decode benchmark and the stand-ins look up when they build) adds its seconds to `seconds`."""
    from ..doubles import random_llama as module

    real = module.random_llama

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t)
    module.random_llama = timed
    try:
        yield
    finally:
        module.random_llama = real


def run_part(ctx: PartRun, torch_in_process: bool = True, imports: tuple[str, ...] = ()) -> dict:
    """Run `ctx.name`'s part in this process: its result, with `outcome` (returned or raised),
    the card's record, seconds, the host's peak memory and `phases`: the process's start (from the
    driver's spawn to here), the part's imports (`imports`, before its work), its model builds and
    the rest, its work."""
    from .parts import PARTS

    phases = {"start_s": round(time.monotonic() - ctx.started, 2)}
    t0 = time.perf_counter()
    simulated, unsimulate = {}, lambda: None
    builds: list[float] = []
    try:
        ctx.watch.take_baseline()           # before this process makes its CUDA context
        for name in imports:
            try:
                importlib.import_module(name)
            except Exception:           # noqa: BLE001  (timed only: the part meets the error itself, as it would)
                phases.setdefault("not_imported", []).append(name)
        phases["import_s"] = round(time.perf_counter() - t0, 2)
        if torch_in_process:
            simulated, unsimulate = simulate_the_card(ctx.device)
        if torch_in_process and (is_cuda(ctx.device) or card_memory.simulated() is not None):
            ctx.card = card_memory.apply_cap(ctx.opt.memory_cap_gib)
        else:
            ctx.card = {"cap_gib": ctx.opt.memory_cap_gib, "applied": False,
                        "why": "--device cpu" if not is_cuda(ctx.device) else
                        "the part's work runs in child processes, each capped by card_memory.join_part"}
        ctx.watch.start()
        ctx.watch.sample("start")
        with timed_builds(builds):
            got = {"outcome": "returned", **PARTS[ctx.name].run(ctx)}
    except Exception as e:              # noqa: BLE001  (the report names what broke)
        got = {"outcome": "raised", "error": f"{type(e).__name__}: {e}"[:2000],
               "traceback": traceback.format_exc()[-4000:]}
        partial = read_partial(ctx.work, ctx.name)
        if partial is not None:
            got["partial"] = partial
        print(got["traceback"], file=sys.stderr, flush=True)
    finally:
        unsimulate()
    try:
        ctx.watch.settle()
    except Exception as e:              # noqa: BLE001  (a broken CUDA state: say so, keep the result)
        got["card_error"] = f"{type(e).__name__}: {e}"[:300]
    got["card"] = {"cap": ctx.card, **ctx.watch.report()}
    if simulated:
        got["simulated"] = simulated
    got["seconds"] = round(time.perf_counter() - t0, 1)
    phases["build_s"] = round(sum(builds), 2)
    phases["work_s"] = round(time.perf_counter() - t0 - phases["import_s"] - phases["build_s"], 2)
    got["phases"] = phases
    got["host_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return got


def child_main(part: str, options: Path, limit: float, started: float | None = None) -> int:
    """The process of one part: read the call's options, run the part, write its result file."""
    from .parts import PARTS

    opt = argparse.Namespace(**json.loads(Path(options).read_text()))
    work = Path(opt.work)
    folder = work / "torch-reserved" / part
    # the part's children (pytest, a Ray worker) report here and take this cap: card_memory.join_part
    os.environ[card_memory.TORCH_DIR_ENV] = str(folder)
    os.environ[card_memory.CAP_ENV] = "" if opt.memory_cap_gib is None else str(opt.memory_cap_gib)
    card_memory.join_simulated_card()
    read = card_memory.read_card if is_cuda(opt.device) else card_memory.read_simulated
    ctx = PartRun(part, opt, work, limit, card_memory.CardSampler(read, folder=folder),
                  started=time.monotonic() if started is None else started)
    got = run_part(ctx, PARTS[part].torch_in_process, PARTS[part].imports)
    write_json(result_path(work, part), json.loads(json.dumps(got, default=str)), indent=1)
    return 0
