"""What a profile's work costs: `scale` (a sample to the profile's sizes), `price` (at each pace
that applies), `notebooks` (per notebook) and `beside` (a run's recorded work and time)."""
from __future__ import annotations

import math

import pandas as pd

from ..artifacts import MECHANISMS, SEED_STEP, table
from ..core.config import Config
from ..runs.plan import RUN_FOLDERS, notebook_parameter, question_runs, work_keys
from ..runs.preflight import method_pace
from .paces import PER_CALL

UNIT = ["step", "table", "run", "method", "dataset"]
# a unit's work, as `price` reports it: calls made, calls computed (unique), the computed calls'
# prompt tokens (pre-filled) and generated tokens, and the rows written from another run's file
WORK = ["calls", "unique", "prompt_tokens", "generated_tokens", "derived"]
TIMED = table("table7").step                    # Table 7's own step: the call cache off


def _work(units: pd.DataFrame) -> pd.DataFrame:
    """A recorded unit's `WORK`, from its counts (`work.COLUMNS`)."""
    return pd.DataFrame({"calls": units["llm_calls"], "unique": units["llm_calls"] - units["llm_cache_hits"],
                         "prompt_tokens": units["computed_prompt_tokens"],
                         "generated_tokens": units["computed_tokens"], "derived": units["derived"]})


def planned_questions(cfg: Config, units: pd.DataFrame,
                      calibration: dict[str, int] | None) -> tuple[pd.Series, pd.Series]:
    """(each unit's questions at the profile's sizes, the question-runs it stands for): a run file
    gains max(0, n - the most an earlier step asked), as steps ask the first n of one seeded
    shuffle; calibrations, training and trials their parameters'; the dry run's own count where
    the profile fixes none (`calibration` None: the dry run's as they are)."""
    runs = question_runs(cfg, as_run=True)
    asked: dict[tuple, int] = {}
    new: dict[tuple, int] = {}
    table: dict[tuple, int] = {}
    for nb, label, dataset, n in zip(runs["notebook"], runs["run"], runs["dataset"], runs["questions"]):
        key = (RUN_FOLDERS.get(nb, "runs"), label, dataset)
        new[(nb, label, dataset)] = max(0, int(n) - asked.get(key, 0))
        asked[key] = max(asked.get(key, 0), int(n))
        table[(nb, label, dataset)] = int(n)
    sizes = {"skr-labels": (SEED_STEP, "N_TRAIN"), "kbae-data": (SEED_STEP, "N_KBAE"),
             "trials": (MECHANISMS, "N_QUESTIONS")}
    keys = list(zip(units["step"], units["run"], units["dataset"]))
    planned = units["questions"].astype(float)
    if calibration is not None:
        given = [notebook_parameter(cfg, *sizes[k[1]]) if k[1] in sizes else None for k in keys]
        planned = pd.Series([new[k] if k in new else calibration[k[1]] if k[1] in calibration else
                             int(g) if g is not None else int(dry) for k, g, dry in zip(keys, given, planned)],
                            index=units.index, dtype=float)
    return planned, pd.Series([table.get(k, q) for k, q in zip(keys, planned)], index=units.index, dtype=float)


def answered_for(cfg: Config, work: pd.DataFrame, stand_ins: dict[str, str] | None) -> pd.DataFrame:
    """The dry run's units under the profile's own data sets: each unit the dry run ran on a
    look-alike (`stand_ins`: {profile's set: the set answered in its place}) once for every set it
    stands in for that the profile plans it on (`plan.work_keys`: its per-question work is
    theirs); as they are without look-alikes."""
    if not stand_ins:
        return work

    planned = work_keys(cfg)
    parts = [work[~work["dataset"].isin(set(stand_ins.values()))]]
    for name, alike in stand_ins.items():
        parts.append(work[work["dataset"] == alike].assign(dataset=name))
    out = pd.concat(parts, ignore_index=True)
    keep = [k in planned for k in zip(out["step"], out["run"], out["dataset"])]
    return out[keep].sort_values("step", kind="stable", ignore_index=True)


def scale(cfg: Config, work: pd.DataFrame, calibration: dict[str, int] | None = None) -> pd.DataFrame:
    """Each unit's work at the profile's sizes: per question as the dry run did it, times the
    unit's planned questions (`planned_questions`; a sampled dry run, given `calibration`), or as
    the dry run counted it (a whole one, `calibration` None).
    Columns: `UNIT`, question_runs, planned, dry_questions, `WORK`, calls_se, unique_se (the
    sample's standard error, in calls, of the unit's totals)."""
    sampled = calibration is not None
    planned, runs = planned_questions(cfg, work, calibration)
    n = work["questions"].where(work["questions"] > 0)
    per = _work(work).div(n, axis=0)
    for col, sq in (("calls", "calls_sq"), ("unique", "computed_sq")):     # the standard error of the mean
        var = (work[sq] / n - per[col] ** 2).clip(lower=0) * n / (n - 1).where(n > 1)
        per[f"{col}_se"] = (var / n) ** 0.5
    # a unit the sample did not reach (its questions an earlier step's there): its run file's rate
    per = per.fillna(per.groupby([work["run"], work["dataset"]]).transform("mean"))
    out = work[UNIT].assign(question_runs=runs, planned=planned, dry_questions=work["questions"])
    out[WORK] = per[WORK].mul(planned, axis=0).where(planned > 0, 0.0) if sampled else _work(work)
    whole = planned <= work["questions"]          # a unit run whole has no error from sampling
    for col in ("calls_se", "unique_se"):
        out[col] = (per[col] * planned).where(~whole, 0.0).fillna(0.0)
    return out


# ------------------------------------------------------------------------------ paces and prices
def _table7_per_call(units: pd.DataFrame, table7: dict) -> dict[tuple[str, str], float]:
    """Table 7's seconds per question over the calls per question this profile's Table 7 step
    makes (the call cache off, as the paper timed): seconds per call of each timed method and set
    (a set the paper did not time at the mean of its two)."""
    timed = units[(units["step"] == TIMED) & (units["planned"] > 0) & (units["calls"] > 0)]
    out = {(m, d): method_pace(table7, m, d) * q / c for m, d, c, q in
           zip(timed["method"], timed["dataset"], timed["calls"], timed["planned"])}
    return {k: v for k, v in out.items() if v == v}        # the methods Table 7 timed


def _cpu_seconds(units: pd.DataFrame, cpu: dict) -> pd.Series:
    """Each unit's computed calls at its step's recorded seconds per computed call, its fixed
    seconds apart (NaN: none)."""
    per = {s: r["per_unit"] for s, r in cpu["steps"].items() if r["unit"] == PER_CALL}
    return units["unique"] * units["step"].map(per)


HOURS = "hours: "               # a priced unit's column of each pace: "hours: <pace>"


def price(cfg: Config, units: pd.DataFrame, cpu: dict | None = None, cards: dict | None = None,
          table7: dict | None = None) -> pd.DataFrame:
    """`units` with an "hours: <pace>" column per pace that applies (NaN where it does not price the
    unit) and `pace`, the paces that price it or "no pace": the CPU record `cpu` (steps without
    calls at their recorded seconds), Table 7 (`table7`, per call) and each card of `cards`, each
    pricing a method's computed calls at that method's own seconds per call only."""
    out = units.copy()
    seconds: dict[str, pd.Series] = {}
    if cpu is not None:
        seconds[f"CPU: {cpu['run']}"] = _cpu_seconds(out, cpu)
    per_call = {"Table 7": _table7_per_call(units, table7) if table7 else {},
                **{f"GPU: {name}": got["per_call"] for name, got in (cards or {}).items()}}
    for name, got in per_call.items():
        if got:
            seconds[name] = out["unique"] * pd.Series([method_pace(got, m, d) for m, d in
                                                       zip(out["method"], out["dataset"])], index=out.index)
    for name, secs in seconds.items():
        out[HOURS + name] = secs / 3600
    out["pace"] = [", ".join(n for n, secs in seconds.items() if secs[i] == secs[i]) or "no pace"
                   for i in out.index]
    if cpu is not None:         # a step's seconds whatever its work, and the steps without model calls
        priced = set(out["step"])
        fixed = [{"step": s, "table": "", "run": "(fixed seconds)" if rec["unit"] == PER_CALL else "(no model calls)",
                  "method": "", "dataset": "", "question_runs": 0,
                  HOURS + f"CPU: {cpu['run']}": (rec["fixed"] if rec["unit"] == PER_CALL else rec["seconds"]) / 3600,
                  "pace": f"CPU: {cpu['run']}",
                  **dict.fromkeys(WORK + ["planned", "dry_questions", "calls_se", "unique_se"], 0.0)}
                 for s, rec in cpu["steps"].items()
                 if rec["unit"] == PER_CALL and rec["fixed"] > 0 and s in priced
                 or rec["unit"] != PER_CALL and s not in priced]
        out = pd.concat([out, pd.DataFrame(fixed)], ignore_index=True).sort_values("step", kind="stable",
                                                                                 ignore_index=True)
    return out


def pace_columns(priced: pd.DataFrame) -> list[str]:
    """The "hours: <pace>" columns of `price`'s units."""
    return [c for c in priced.columns if c.startswith(HOURS)]


def notebooks(priced: pd.DataFrame) -> pd.DataFrame:
    """Per notebook: question-runs, `WORK`, standard errors (in quadrature), and per pace its hours
    and the question-runs it prices."""
    g = priced.groupby("step", sort=True)
    out = g[["question_runs"] + WORK].sum()
    for col in ("calls_se", "unique_se"):
        out[col] = g[col].apply(lambda s: math.sqrt((s ** 2).sum()))
    for col in pace_columns(priced):
        out[col] = g[col].sum(min_count=1)
        out["question-runs at " + col[len(HOURS):]] = priced["question_runs"].where(priced[col].notna(), 0) \
            .groupby(priced["step"]).sum()
    return out.reset_index()


def beside(predicted: pd.DataFrame, actual: pd.DataFrame, seconds: dict[str, float]) -> pd.DataFrame:
    """Per notebook, calls, unique calls, derived rows and seconds (at the first pace) predicted
    beside a run's files and stamps, and actual over predicted."""
    act = actual.assign(calls=actual["llm_calls"], unique=actual["llm_calls"] - actual["llm_cache_hits"]) \
        .groupby("step")[["calls", "unique", "derived"]].sum()
    pred = predicted.set_index("step")
    hours = pace_columns(predicted)
    steps = sorted(set(pred.index) | set(act.index) | set(seconds))
    out = pd.DataFrame({"step": steps})
    for what in ("calls", "unique", "derived"):
        out[f"{what} predicted"] = pred[what].reindex(steps, fill_value=0.0).to_numpy()
        out[f"{what} actual"] = act[what].reindex(steps, fill_value=0.0).to_numpy()
    out["seconds predicted"] = (pred[hours[0]] * 3600).reindex(steps).to_numpy() if hours else float("nan")
    out["seconds actual"] = [seconds.get(step, float("nan")) for step in steps]
    for what in ("calls", "unique", "derived", "seconds"):
        pr, ac = out[f"{what} predicted"], out[f"{what} actual"]
        out[f"{what} actual/predicted"] = (ac / pr).where((pr != 0) & pr.notna() & ac.notna())
    return out
