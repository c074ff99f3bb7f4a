"""What a profile's paper tables cost before any of it runs: the hours its question-runs
(`plan.question_runs`) take at the only GPU pace measured for these methods: the paper's Table 7
(seconds per question on 2Wiki and HotpotQA, 4x GeForce 3090, vLLM).

The hours are ARITHMETIC: questions x the paper's seconds per question. The paper timed FLARE,
DRAGIN and SeaKR on two complex sets only; every SeaKR-family row (ablations, backbones) takes
SeaKR's pace, a set the paper did not time takes the mean of its two, and methods it did not
time get no hours (their question-runs are still counted). `python -m seakr_repro cost --profile
paper` prints the table (`--workers N`: the hours divided over N Ray workers, `spread`); `status`
gives the pace a run actually keeps once it has started.

Beside it, the GPU paces this package measured itself (`data/measured/gpu_pace.csv`: one row per
card, commit, method and data set, with what ran; a later GPU run adds rows): `measured_paces`
gives each card's newest rows at the paper's settings, and `cost` prints the hours at each beside
Table 7's, naming the card. Random weights run every generation to its limit, so those hours are
an upper bound for that card with this package's transformers backend.
"""
from __future__ import annotations

import statistics

import pandas as pd

from ..core.config import Config
from ..core.paths import DATA_DIR
from .plan import question_runs  # noqa: F401  (what `cost` prices; importable from here as before)

PACE_TABLE = "seakr_table7"
# The committed file of measured GPU paces, which `measured_paces` and the `cost` command read (a
# test points this at a file of its own, so a row a GPU run appends never changes what it checks)
MEASURED_PACE = DATA_DIR / "measured" / "gpu_pace.csv"
MEASURED_COLUMNS = ("card", "commit_date", "commit", "torch", "dtype", "weights", "what_ran", "settings",
                    "method", "dataset", "seconds_per_question", "note")


def measured_paces(settings: str = "paper", path=None) -> dict[str, dict]:
    """{card: {"pace": {(method, data set): seconds per question}, "rows": provenance records}}
    from the measured-pace file: each card's newest row (by commit date, then file order) per
    method and data set at `settings` (the profile whose per-question settings the row ran)."""
    from ..core.errors import DataMissingError

    path = MEASURED_PACE if path is None else path
    try:
        df = pd.read_csv(path, dtype={"commit": str})
    except FileNotFoundError:
        raise DataMissingError("the measured GPU pace file is missing", path=path,
                               fix="restore it from git (git checkout -- data/measured)") from None
    missing = [c for c in MEASURED_COLUMNS if c not in df.columns]
    if missing:
        from ..core.errors import UserError
        raise UserError(f"columns {missing} are missing", path=path,
                        fix=f"give it the columns {', '.join(MEASURED_COLUMNS)}")
    df = df[df["settings"] == settings].sort_values("commit_date", kind="stable")
    out: dict[str, dict] = {}
    for card, rows in df.groupby("card", sort=True):
        rows = rows.drop_duplicates(["method", "dataset"], keep="last")
        out[card] = {"pace": {(m, d): float(v) for m, d, v in
                              zip(rows["method"], rows["dataset"], rows["seconds_per_question"])},
                     "rows": rows.to_dict("records")}
    return out


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
