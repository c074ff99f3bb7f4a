"""What a profile's paper tables cost before any of it runs: the hours its question-runs
(`plan.question_runs`) take at the only GPU pace measured for these methods: the paper's Table 7
(seconds per question on 2Wiki and HotpotQA, 4x GeForce 3090, vLLM).

The hours are ARITHMETIC: questions x the paper's seconds per question. The paper timed FLARE,
DRAGIN and SeaKR on two complex sets only; every SeaKR-family row (ablations, backbones) takes
SeaKR's pace, a set the paper did not time takes the mean of its two, and methods it did not
time get no hours (their question-runs are still counted). `python -m seakr_repro cost --profile
paper` prints the table (`--workers N`: the hours divided over N Ray workers, `spread`); `status`
gives the pace a run actually keeps once it has started.
"""
from __future__ import annotations

import statistics

import pandas as pd

from ..core.config import Config
from .plan import question_runs  # noqa: F401  (what `cost` prices; importable from here as before)

PACE_TABLE = "seakr_table7"


def paper_pace() -> dict[tuple[str, str], float]:
    """{(method, data set): seconds per question} from the paper's Table 7."""
    from ..reporting.paper_numbers import load_paper_table

    df = load_paper_table(PACE_TABLE)
    return {(m, d): float(v) for m, d, v in zip(df["method"], df["dataset"], df["value"])}


def pace_applies(cfg: Config) -> bool:
    """Whether the profile runs the model the paper timed (its hours mean something there)."""
    from ..reporting.paper_numbers import load_paper_table

    return cfg["model.name"] in set(load_paper_table(PACE_TABLE)["model"])


def with_hours(runs: pd.DataFrame, pace: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """`runs` plus seconds_per_question (the paper's, see the module's note; NaN where the
    paper timed no such method) and hours = questions x seconds / 3,600."""
    pace = paper_pace() if pace is None else pace
    by_method: dict[str, list[float]] = {}
    for (m, _), s in pace.items():
        by_method.setdefault(m, []).append(s)
    out = runs.copy()
    out["seconds_per_question"] = [
        pace.get((m, d), statistics.mean(by_method[m]) if m in by_method else float("nan"))
        for m, d in zip(out["method"], out["dataset"])]
    out["hours"] = out["questions"] * out["seconds_per_question"] / 3600
    return out


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per notebook: runs and question-runs; with hours (`with_hours`), also the question-runs
    that have a pace and their hours."""
    g = runs.groupby(["notebook", "table"], sort=True)
    out = pd.DataFrame({"runs": g.size(), "question_runs": g["questions"].sum()})
    if "hours" in runs:
        paced = runs["questions"].where(runs["seconds_per_question"].notna(), 0)
        out["with_paper_pace"] = paced.groupby([runs["notebook"], runs["table"]]).sum()
        out["hours_at_paper_pace"] = g["hours"].sum(min_count=1).round(1)
    return out.reset_index()


def totals(runs: pd.DataFrame) -> tuple[int, int, float]:
    """(question-runs, those with a pace, their hours); the last two 0 without `with_hours`."""
    if "hours" not in runs:
        return int(runs["questions"].sum()), 0, 0.0
    timed = runs["hours"].notna()
    return int(runs["questions"].sum()), int(runs.loc[timed, "questions"].sum()), float(runs["hours"].sum())


def spread(hours: float, workers: int) -> float:
    """Wall-clock hours of `hours` of question-runs over `workers` Ray workers (runner.engine:
    ray): hours / workers. ARITHMETIC: it assumes each worker keeps the pace the hours were
    computed at and that the questions divide evenly (they are handed out one at a time, so the
    last few questions of a run are the only idle time); nothing here measured it."""
    if workers < 1:
        from ..core.errors import UserError
        raise UserError(f"--workers is {workers}", setting="--workers", fix="give 1 or more workers")
    return hours / workers
