"""The card check's time: the parts' order and estimates, the rule that starts a part, and the
one call a lent GPU machine runs (docs/measurements.md, "The card check", gives each figure's source).

The check has a limit (`LIMIT_S` by default at LLaMA-2-7B's shape on a GPU). SeaKR's part, the main
job, runs first and must fit it with `SPARE` of the limit left by these estimates; every later part
starts only where its estimate and `MARGIN_S` still fit before the limit (`may_start`), else it is
named as not run, with its estimate and what was left.
"""
from __future__ import annotations

PARTS = ("seakr", "methods", "decode", "oom")
PAPER_SETS = ("2wiki", "hotpotqa")      # SeaKR's sets: the two Table 7 times
LIMIT_S = 300                           # the check's default limit at LLaMA-2-7B's shape on a GPU
SPARE = 0.25                            # of the limit, left over SeaKR's part by the estimates
MARGIN_S = 10.0                         # a later part starts only with this beyond its estimate

# Seconds at LLaMA-2-7B's shape in float16 on one H100 80GB, from the first GPU run (fa729e8):
# the process's start, imports and CUDA context; the stand-in inputs; SeaKR's decode-path check (a
# 7B build and a float32 copy of 2 layers); one SeaKR question at the paper's settings (89.45 s on
# the eager one_sync path: an upper bound for the faster paths); the other five methods' one
# question each with their builds; the decode benchmark's timings; the out-of-memory retry.
H100_7B = {"start": 16.0, "inputs": 5.0, "path_check": 15.0, "seakr_question": 89.5,
           "methods": 60.0, "decode": 35.0, "oom": 40.0}

# The one call on a lent GPU machine (scripts/gpu_check.sh): the pack unpacked and compiled, the
# check at its limit, then `pytest -m gpu`, the end.
CALL = {"unpack_and_compile": 25.0, "check_card": float(LIMIT_S), "pytest_gpu": 45.0, "end": 10.0}
CALL_MAX_S = 420


def estimate(part: str, est: dict = H100_7B, sets: int = len(PAPER_SETS)) -> float:
    if part == "seakr":
        return est["start"] + est["inputs"] + est["path_check"] + sets * est["seakr_question"]
    return est[part]


def may_start(need: float | None, used: float, limit: float | None) -> tuple[bool, str]:
    """(start?, why not): a part whose estimate is `need` seconds (None: no estimate at this shape,
    taken as 0), `used` seconds into a check of `limit` seconds (None: no limit)."""
    if limit is None:
        return True, ""
    left = limit - used
    if (need or 0.0) + MARGIN_S <= left:
        return True, ""
    return False, (f"needs about {need or 0:.0f} s and {MARGIN_S:.0f} s of margin; "
                   f"{max(left, 0):.0f} s of the {limit:.0f} s limit were left")


def call_seconds() -> float:
    return sum(CALL.values())
