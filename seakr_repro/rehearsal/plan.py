"""The plan of the one call: the parts in their order, what each is expected to take, the call's
time budget, and what a second call must run when the first could not reach everything.

A lent GPU comes rarely and for minutes (assumptions.py), so the whole report comes from ONE call
of `scripts/gpu_rehearsal.sh` with no arguments: first what no GPU has shown yet, then what a GPU
has shown before. The budget leaves the session room for a second call of what the first could
not reach (`next_call`), on the machine still warm:

    PLAN_DEVICE_SECONDS = machine start + unpacking the pack + BUDGET_SECONDS + slack
                    600 =            60 +                 15 +            480 +    45

`TIMEOUT_S` (the device tool's timeout_s for the call) is the budget plus the unpacking and the
slack: the call ends on its own well before it.

Each part's estimate is the whole run of its process on the lent card at the paper's shape:
imports, model builds and work (seakr_paper: the setup, then each question). The figures and the
arithmetic behind them are in docs/measurements.md ("The one call"); the report of each call
gives what each part took, so the next plan starts from those. A part runs only where its
estimate fits in what is left of the budget, else it is skipped and says so with its estimate;
it runs under a limit of twice its estimate plus a minute (`--part-seconds` sets another), so a
part that hangs cannot take the later ones' time; seakr_paper, last, has all that is left and
starts a question only where it fits.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import assumptions as lent

# every part, in the order the one call runs them; gpu_check is optional (not in the one call:
# see parts/gpu_check.py's docstring)
PARTS = ("env", "gpu_tests", "decode_bench", "methods", "oom", "ray", "seakr_paper", "gpu_check")
ONE_CALL = ("env", "gpu_tests", "decode_bench", "methods", "oom", "ray", "seakr_paper")
PAPER_SETS = ("2wiki", "hotpotqa")            # seakr_paper's sets: the two Table 7 times

PLAN_DEVICE_SECONDS = 600     # of the session's 15 minutes: a second call of ~4 minutes still fits
UNPACK_SECONDS = 15           # the pack's archives unpacked into /tmp before the first part
SLACK_SECONDS = 45            # a slower machine start, the last report written, the files brought back
BUDGET_SECONDS = PLAN_DEVICE_SECONDS - lent.MACHINE_START_SECONDS - UNPACK_SECONDS - SLACK_SECONDS
TIMEOUT_S = BUDGET_SECONDS + UNPACK_SECONDS + SLACK_SECONDS
NEXT_CALL_MARGIN_S = 30       # a second call's budget: its parts' estimates and this
FIT_FACTOR, FIT_MARGIN_S = 1.1, 10.0   # a question starts where its estimate x 1.1 + 10 s fits


@dataclass(frozen=True)
class Estimate:
    """Seconds a part's process is expected to take: `seconds` in all (seakr_paper: its setup),
    plus `per_question` for each question (seakr_paper)."""
    seconds: float
    per_question: float = 0.0

    def least(self, questions: int = 1) -> float:
        """What the part needs to prove anything: its setup and room for `questions` questions."""
        return self.seconds + questions * question_room(self.per_question) if self.per_question else self.seconds


def question_room(seconds: float) -> float:
    """The time a question of about `seconds` must find left before it starts."""
    return FIT_FACTOR * seconds + FIT_MARGIN_S


# The lent card (one H100 80GB), LLaMA-2-7B's shape in float16 under the 24 GiB cap:
# docs/measurements.md, "The one call", gives each figure's source and arithmetic.
H100 = {"env": Estimate(15), "gpu_tests": Estimate(25), "decode_bench": Estimate(45),
        "methods": Estimate(60), "oom": Estimate(35), "ray": Estimate(60),
        "seakr_paper": Estimate(15, per_question=90), "gpu_check": Estimate(40)}
# The tiny shape on this project's 2-core CPU, busy (the `make test` run of the one call).
TINY_CPU = {"env": Estimate(40), "gpu_tests": Estimate(20), "decode_bench": Estimate(25),
            "methods": Estimate(45), "oom": Estimate(20), "ray": Estimate(120),
            "seakr_paper": Estimate(25, per_question=35), "gpu_check": Estimate(25)}
ESTIMATES = {"llama-2-7b": H100, "tiny": TINY_CPU}
ESTIMATE_SOURCE = {"llama-2-7b": "plan for one H100 (docs/measurements.md, 'The one call')",
                   "tiny": "the tiny shape on a busy 2-core CPU (docs/measurements.md, 'The one call')"}


def estimate(part: str, shape: str) -> Estimate:
    return ESTIMATES[shape][part]


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
    """The second call for what this one could not reach (skipped parts; seakr_paper's sets with
    no question), with its exact REHEARSAL_ARGS, budget and timeout_s; None when nothing is left."""
    parts = report.get("parts", {})
    shape = report.get("shape", "llama-2-7b")
    todo = [p for p in PARTS if (parts.get(p) or {}).get("status") == "skipped"]
    sets = []
    paper = parts.get("seakr_paper") or {}
    if paper.get("status") == "skipped":
        sets = [d for d, s in (paper.get("set_status") or {}).items() if s == "skipped"] or \
               list(report.get("paper_sets") or PAPER_SETS)
    if not todo:
        return None
    need = sum(estimate(p, shape).least(len(sets) if p == "seakr_paper" else 1) for p in todo)
    budget = int(min(need + NEXT_CALL_MARGIN_S, BUDGET_SECONDS))
    args = f"--parts {','.join(todo)}" + (f" --paper-sets {','.join(sets)}" if sets else "") + f" --budget {budget}"
    timeout = budget + UNPACK_SECONDS + SLACK_SECONDS
    return {"REHEARSAL_ARGS": args, "timeout_s": timeout,
            "command": f'REHEARSAL_ARGS="{args}" bash scripts/gpu_rehearsal.sh $OUT',
            "device_minutes": round(timeout / 60, 1),
            "when": f"within {lent.WARM_SECONDS} s of this call's end, on the machine still warm (later, a new "
                    f"machine's start adds about {lent.MACHINE_START_SECONDS} s)",
            "why": "not reached by this call: " + "; ".join(
                f"{p} ({(parts[p].get('skipped') or {}).get('why') or parts[p].get('why')})" for p in todo)}
