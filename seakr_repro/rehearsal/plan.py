"""The plan of the lent machine's calls: the parts in their order, what each is expected to take
(split into its process's start, its imports, its model builds and its work), each call's budget
with its slack, and what a second call must run.

A lent GPU comes rarely and for minutes (assumptions.py): a session has DEVICE_SECONDS in all,
the machine's start included. The parts run in ONE_CALL's order, first what no GPU has shown yet;
`calls(shape)` packs them into prepared calls: the first holds the parts, in order, while its
timeout_s stays within one command's limit and what is left still fits a second call in the
session; the second call holds the rest. Each call's budget keeps SLACK_FRACTION of itself
unspent by the estimates (`Call.budget` = the estimates / (1 - SLACK_FRACTION)); the driver starts
a part, or a seakr_paper question, only where its estimate fits before that reserve, which is
left to parts that run over. seakr_paper, where it is in a call, is given room for one question
of each set. What the session spends:

    machine start + call 1 (transfer + timeout_s) + the warm wait + call 2 (transfer + timeout_s)
    <= DEVICE_SECONDS,  timeout_s = unpacking + compiling + budget + the end

The estimates at LLaMA-2-7B's shape (`lent_estimates`): each part's process start and imports
from `python -m seakr_repro.rehearsal.cold_start` (data/measured/rehearsal_cold_start.json; warm:
the call compiles the bytecode before the first part) times COLD_START_FACTOR, the CUDA context
beside; its model builds and work from the first GPU run's figures (GPU_WORK). docs/measurements.md
("The one call") gives every figure's source and the arithmetic, and the report of each call gives
what each part took (`phases`), so the next plan starts from those.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import assumptions as lent

# every part, in the order the calls run them; gpu_check is optional (in no call: see
# parts/gpu_check.py's docstring)
PARTS = ("env", "gpu_tests", "decode_bench", "methods", "oom", "ray", "seakr_paper", "gpu_check")
ONE_CALL = ("env", "gpu_tests", "decode_bench", "methods", "oom", "ray", "seakr_paper")
PAPER_SETS = ("2wiki", "hotpotqa")            # seakr_paper's sets: the two Table 7 times

SLACK_FRACTION = 0.15        # of each call's budget, left to parts that run over their estimate
TRANSFER_SECONDS = 15        # the checkout and the pack sent (~55 MiB), the report brought back: per call
UNPACK_SECONDS = 15          # the pack's archives unpacked into /tmp before the first part
END_SECONDS = 15             # after the budget: the last part stopped, the report written
FIT_FACTOR, FIT_MARGIN_S = 1.1, 10.0   # a question starts where its estimate x 1.1 + 10 s fits
# The lent machine's process start and imports over this project's CPU's (its CPU seconds, which a
# busy machine stretches far less than the wall time): the lent processor's speed per core is
# unknown (a third slower is allowed for), and a fresh machine reads torch's libraries (~2 GB)
# from a cold disk once (docs/measurements.md, "The one call").
COLD_START_FACTOR = 1.5
CUDA_CONTEXT_S = 5.0         # a process's CUDA context and first cuBLAS handle (estimated: not measurable here)
COMPILE_SPEEDUP = 4          # compileall -j 0 on the lent machine's 16 cores over one process (estimated)


@dataclass(frozen=True)
class Estimate:
    """Seconds a part's process is expected to take, split: `start` (from the driver's spawn to
    the part: the interpreter and the rehearsal's own modules), `imports` (the part's import list,
    import_lists.py; on a GPU its CUDA context too), `build` (its random-weight models), `work`
    (the rest; seakr_paper: its setup) and `per_question` (seakr_paper: each question)."""
    start: float = 0.0
    imports: float = 0.0
    build: float = 0.0
    work: float = 0.0
    per_question: float = 0.0

    @property
    def seconds(self) -> float:
        return self.start + self.imports + self.build + self.work

    def least(self, questions: int = 1) -> float:
        """What the part needs to prove anything: its setup and room for `questions` questions."""
        return self.seconds + questions * question_room(self.per_question) if self.per_question else self.seconds

    def split(self) -> dict[str, float]:
        return {k: round(v, 1) for k, v in vars(self).items() if v} | {"seconds": round(self.seconds, 1)}


def question_room(seconds: float) -> float:
    """The time a question of about `seconds` must find left before it starts."""
    return FIT_FACTOR * seconds + FIT_MARGIN_S


# ------------------------------------------------------------------ LLaMA-2-7B on the lent card
# Each part's model builds and work on one H100 80GB at LLaMA-2-7B's shape in float16, from the
# first GPU run (fa729e8; docs/measurements.md, "The one call", gives each figure's arithmetic):
# (build, work, per_question); `work` beside these: env walks every module (measured here), and
# gpu_tests' and ray's extra processes start and import (measured here).
GPU_WORK = {
    "env": (0.0, 2.0, 0.0),
    "gpu_tests": (0.0, 15.0, 0.0),
    "decode_bench": (5.0, 41.5, 0.0),
    "methods": (15.0, 36.4, 0.0),
    "oom": (5.0, 24.6, 0.0),
    "ray": (5.0, 47.1, 0.0),
    "seakr_paper": (5.0, 5.0, 89.5),
    "gpu_check": (5.0, 35.0, 0.0),
}
# which import list (import_lists.py) each part's process runs before its work
IMPORT_LIST = {"env": "TORCH", "gpu_tests": None, "decode_bench": "MODEL", "methods": "PIPELINE",
               "oom": "MODEL", "ray": "PIPELINE", "seakr_paper": "PIPELINE", "gpu_check": "MODEL"}


def lent_estimates(record: dict | None = None) -> dict[str, Estimate]:
    """The parts' estimates on the lent card, from the cold-start record (the committed one by
    default: its warm CPU seconds, the call compiling the bytecode before the first part) and
    GPU_WORK."""
    from .cold_start import read_record

    rec = (record or read_record() or {}).get("seconds")
    if not rec:
        raise RuntimeError("no cold-start record: run python -m seakr_repro.rehearsal.cold_start")
    f = COLD_START_FACTOR
    start = f * rec["start"]["warm"]["cpu"]
    imports = {k: f * v["warm"]["cpu"] + CUDA_CONTEXT_S for k, v in rec["imports"].items()}
    out = {}
    for part, (build, work, per_q) in GPU_WORK.items():
        lst = IMPORT_LIST[part]
        extra = 0.0
        if part == "env":                   # its work: every module of the package imported
            extra = f * rec["every_module"]["warm"]["cpu"]
        elif part == "gpu_tests":           # pytest's process: a start, torch, its CUDA context
            extra = start + imports["TORCH"]
        elif part == "ray":                 # the Ray worker's process: a start, the run layer, its context
            extra = start + imports["PIPELINE"]
        out[part] = Estimate(start, imports[lst] if lst else 0.0, build, work + extra, per_q)
    return out


def compile_seconds(record: dict | None = None) -> float:
    """The call's bytecode compile at its start on the lent machine (scripts/gpu_rehearsal.sh):
    one process's CPU seconds here, times the factor, over the lent machine's parallel speed-up."""
    from .cold_start import read_record

    rec = (record or read_record() or {}).get("seconds") or {}
    serial = ((rec.get("compile") or {}).get("serial") or {}).get("cpu", 0.0)
    return COLD_START_FACTOR * serial / COMPILE_SPEEDUP


# ------------------------------------------------------------------ the tiny shape on this CPU
# The CPU one call at the tiny shape (docs/measurements.md, "The one call": the run they come
# from; busy), each part's `phases` rounded up to whole seconds; times TINY_SPREAD, as the same
# call has taken from 121 to 232 s in four runs on this shared machine.
TINY_CPU = {"env": Estimate(1, 8, 0, 10), "gpu_tests": Estimate(1, 0, 0, 6),
            "decode_bench": Estimate(1, 11, 1, 2), "methods": Estimate(1, 13, 1, 6),
            "oom": Estimate(1, 10, 1, 1), "ray": Estimate(1, 14, 1, 34),
            "seakr_paper": Estimate(1, 13, 1, 1, per_question=20), "gpu_check": Estimate(1, 11, 1, 10)}
TINY_SPREAD = 2.0


def estimates(shape: str) -> dict[str, Estimate]:
    if shape == "llama-2-7b":
        return lent_estimates()
    return {p: Estimate(*(TINY_SPREAD * v for v in vars(e).values())) for p, e in TINY_CPU.items()}


ESTIMATE_SOURCE = {"llama-2-7b": "plan for the lent card: the cold-start record and the first GPU run's figures "
                                 "(docs/measurements.md, 'The one call')",
                   "tiny": "the tiny shape on a busy 2-core CPU (docs/measurements.md, 'The one call')"}


def estimate(part: str, shape: str) -> Estimate:
    return estimates(shape)[part]


# ------------------------------------------------------------------ the calls
@dataclass(frozen=True)
class Call:
    """One prepared call: its parts, the estimates' sum (seakr_paper with one question of each
    of `sets`), its budget (that sum and the slack), its timeout_s and its device seconds (the
    transfer and timeout_s)."""
    parts: tuple[str, ...]
    need: float
    budget: int
    timeout_s: int
    device_s: int
    sets: tuple[str, ...] = field(default=PAPER_SETS)

    @property
    def slack(self) -> float:
        return self.budget - self.need

    def args(self) -> str:
        return f"--parts {','.join(self.parts)} --budget {self.budget}" + (
            f" --paper-sets {','.join(self.sets)}" if "seakr_paper" in self.parts and self.sets != PAPER_SETS else "")


def make_call(parts, shape: str, sets=PAPER_SETS) -> Call:
    """The call of `parts` (in order): budget = their estimates / (1 - SLACK_FRACTION), rounded up."""
    est = estimates(shape)
    need = sum(est[p].least(len(sets) if p == "seakr_paper" else 1) for p in parts)
    budget = math.ceil(need / (1 - SLACK_FRACTION))
    timeout = math.ceil(budget + call_fixed_seconds(shape))
    return Call(tuple(parts), round(need, 1), budget, timeout, timeout + TRANSFER_SECONDS, tuple(sets))


def call_fixed_seconds(shape: str) -> float:
    """What a call spends beside its budget: unpacking the pack, compiling (on the lent machine),
    the end."""
    return UNPACK_SECONDS + (compile_seconds() if shape == "llama-2-7b" else 0.0) + END_SECONDS


def session_seconds(calls_: list[Call]) -> int:
    """Device seconds of a session that runs these calls one after another on one machine: its
    start, each call, and the warm wait before each call after the first."""
    return lent.MACHINE_START_SECONDS + sum(c.device_s for c in calls_) + lent.WARM_SECONDS * (len(calls_) - 1)


def calls(shape: str = "llama-2-7b", parts=ONE_CALL) -> list[Call]:
    """The prepared calls of `parts` on the lent card: the first takes them in order while its
    timeout_s stays within one command's limit and the rest still fit a second call in the
    session; the second takes the rest. Raises where even that does not fit (the plan must
    change, not the call). At the tiny shape (this CPU, no lent machine's limits) one call."""
    parts = list(parts)
    if shape != "llama-2-7b":           # here, not on a lent machine: no command or session limit
        return [make_call(parts, shape)]
    for k in range(len(parts), 0, -1):
        first = make_call(parts[:k], shape)
        if first.timeout_s > lent.SECONDS_PER_CALL:
            continue
        out = [first] + ([make_call(parts[k:], shape)] if parts[k:] else [])
        if all(c.timeout_s <= lent.SECONDS_PER_CALL for c in out) and session_seconds(out) <= lent.DEVICE_SECONDS:
            return out
    raise ValueError(f"the parts {parts} do not fit two calls of the session at the {shape} shape: "
                     f"{[round(estimate(p, shape).least(), 1) for p in parts]} s")


def first_call(shape: str) -> Call:
    return calls(shape)[0]


def part_limit(part: str, shape: str) -> float:
    """The most a part may run before its process is stopped (seakr_paper: unbounded here; it has
    what is left of the budget)."""
    if part == "seakr_paper":
        return float("inf")
    return 2 * estimate(part, shape).seconds + 60


def skip_record(part: str, shape: str, need: float, left: float, what: str = "") -> dict:
    """What a part skipped for time says: its estimate, what was left, and where the estimate comes from."""
    return {"estimate_s": round(need), "left_s": round(max(left, 0)), "estimate_from": ESTIMATE_SOURCE[shape],
            "why": f"{what or part} needs about {need:.0f} s, {max(left, 0):.0f} s of the budget were left"}


def next_call(report: dict) -> dict | None:
    """The second call: what this one could not reach (skipped parts; seakr_paper's sets with no
    question) and, where this was the plan's first call, the plan's second call's parts, with
    the exact REHEARSAL_ARGS, budget and timeout_s; None when nothing is left."""
    parts = report.get("parts", {})
    shape = report.get("shape", "llama-2-7b")
    todo = [p for p in PARTS if (parts.get(p) or {}).get("status") == "skipped"]
    sets: list[str] = []
    paper = parts.get("seakr_paper") or {}
    if paper.get("status") == "skipped":
        sets = [d for d, s in (paper.get("set_status") or {}).items() if s == "skipped"] or \
               list(report.get("paper_sets") or PAPER_SETS)
    planned = calls(shape)
    ran = list((report.get("plan") or {}).get("parts") or ())
    prepared = [p for p in planned[1].parts if p not in parts] if len(planned) > 1 and \
        ran == list(planned[0].parts) else []
    if "seakr_paper" in prepared:
        sets = list(report.get("paper_sets") or PAPER_SETS)
    todo += [p for p in prepared if p not in todo]
    if not todo:
        return None
    todo = [p for p in PARTS if p in todo]
    call = make_call(todo, shape, sets or PAPER_SETS)
    args = (f"--parts {','.join(todo)}" + (f" --paper-sets {','.join(sets)}" if sets else "")
            + f" --budget {call.budget}")
    why = [f"{p} ({(parts[p].get('skipped') or {}).get('why') or parts[p].get('why')})" for p in todo if p in parts]
    why += [f"{p} (the plan's second call)" for p in todo if p not in parts]
    return {"REHEARSAL_ARGS": args, "timeout_s": call.timeout_s,
            "command": f'REHEARSAL_ARGS="{args}" bash scripts/gpu_rehearsal.sh $OUT',
            "device_minutes": round(call.device_s / 60, 1),
            "when": f"within {lent.WARM_SECONDS} s of this call's end, on the machine still warm (later, a new "
                    f"machine's start adds about {lent.MACHINE_START_SECONDS} s)",
            "why": "not reached by this call: " + "; ".join(why)}


# Parts whose work could share one process without making their memory figures wrong (each resets
# torch's peak and frees its models before the next; the CUDA context is one process's either way):
# env's imports and decode_bench's; methods' run layer and seakr_paper's. Not done: each part keeps
# a process of its own, so a crash, a hang or an out-of-memory error stays in it.
SHAREABLE = (("env", "decode_bench"), ("methods", "seakr_paper"))


def shared_saving(a: str, b: str, shape: str = "llama-2-7b") -> float:
    """Seconds one process for parts `a` then `b` would save: `b`'s process start and the imports
    (with the CUDA context) the two have in common."""
    est = estimates(shape)
    return est[b].start + min(est[a].imports, est[b].imports)


# ------------------------------------------------------------------ the plan, printed
def device_call(call: Call, first: bool = False) -> dict:
    """The device tool's `run` arguments of a prepared call (the first: the script's defaults)."""
    command = "bash scripts/gpu_rehearsal.sh $OUT" if first else \
        f'REHEARSAL_ARGS="{call.args()}" bash scripts/gpu_rehearsal.sh $OUT'
    return {"command": command, "carry": [".gpu-rehearsal"], "timeout_s": call.timeout_s}


def table(shape: str = "llama-2-7b") -> str:
    """The itemised plan of the calls (markdown): each part's start, imports, builds, work, and
    each call's budget, slack, timeout_s and the session's device time."""
    est, planned = estimates(shape), calls(shape)
    fixed = call_fixed_seconds(shape)
    lines = ["| call | part | start | imports | builds | work | a question | estimate |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for i, c in enumerate(planned, 1):
        for p in c.parts:
            e = est[p]
            q = f"{len(c.sets)} x {question_room(e.per_question):.1f}" if e.per_question else ""
            n = len(c.sets) if p == "seakr_paper" else 1
            lines.append(f"| {i} | {p} | {e.start:.1f} | {e.imports:.1f} | {e.build:.1f} | {e.work:.1f} | {q} | "
                         f"{e.least(n):.1f} |")
        lines.append(f"| {i} | **in all** | | | | | | **{c.need:.1f}**: budget {c.budget} s (slack "
                     f"{c.slack:.0f} s, {c.slack / c.budget:.0%}), timeout_s {c.timeout_s} = {c.budget} + "
                     f"{fixed:.0f} (unpacking, compiling, the end) |")
    lines.append(f"\nThe session: machine start {lent.MACHINE_START_SECONDS} s + "
                 + " + ".join(f"call {i} ({c.timeout_s} + {TRANSFER_SECONDS} transfer)" for i, c in
                              enumerate(planned, 1))
                 + (f" + {lent.WARM_SECONDS * (len(planned) - 1)} s warm wait" if len(planned) > 1 else "")
                 + f" = {session_seconds(planned)} s of {lent.DEVICE_SECONDS}.")
    lines.append("One process for " + "; for ".join(f"{a} and {b} would save {shared_saving(a, b, shape):.1f} s"
                                                  for a, b in SHAREABLE) + " (plan.SHAREABLE).")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m seakr_repro.rehearsal.plan",
                                description="the prepared calls of the rehearsal and their itemised plan")
    p.add_argument("--shape", default="llama-2-7b", choices=("llama-2-7b", "tiny"))
    a = p.parse_args(argv)
    print(table(a.shape))
    for i, c in enumerate(calls(a.shape), 1):
        print(f"\ncall {i}: {json.dumps(device_call(c, first=i == 1))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
