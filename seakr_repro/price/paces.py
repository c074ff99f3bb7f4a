"""The paces `cost` prices at (docs/paper-profile.md, "The paces"): the paper's Table 7, for the
methods it timed on its model; the GPU paces measured here (`gpu_pace.csv`, per card, method, data
set and decode path), each for its own method's calls; the CPU runs recorded here (`cpu_pace.csv`,
per profile and step, per computed call); and those runs' decisions (`decisions.csv`), which a
fresh clone's dry run takes for its profile, or for another on the same model.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from ..core.config import Config
from ..core.errors import DataMissingError, UserError
from ..core.paths import DATA_DIR, RESULTS_ROOT

# The committed files of measured paces (a test points these at files of its own, so a row a run
# appends never changes what it checks)
MEASURED_PACE = DATA_DIR / "measured" / "gpu_pace.csv"
MEASURED_COLUMNS = ("card", "commit_date", "commit", "torch", "dtype", "weights", "what_ran", "settings",
                    "method", "dataset", "seconds_per_question", "note")
CALLS_COLUMN = "llm_calls_per_question"       # optional: the model calls of the row's questions
PATH_COLUMN = "decode_path"                   # optional: the decode loop the row ran
CPU_PACE = DATA_DIR / "measured" / "cpu_pace.csv"
CPU_COLUMNS = ("profile", "run", "commit", "machine", "step", "seconds", "unit", "computed_calls",
               "prompt_tokens", "generated_tokens", "off", "note")
PER_CALL, PER_STEP = "computed call", "step"  # a CPU pace's units
DECISIONS = DATA_DIR / "measured" / "decisions.csv"
DECISION_COLUMNS = ("profile", "run", "model", "retrieve_rate", "answer_rate", "words", "newline_rate")


def _read(path, columns: tuple, what: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype={"commit": str})
    except FileNotFoundError:
        raise DataMissingError(f"the {what} file is missing", path=path,
                               fix="restore it from git (git checkout -- data/measured)") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"columns {missing} are missing", path=path,
                        fix=f"give it the columns {', '.join(columns)}")
    return df


def measured_paces(settings: str = "paper", path=None) -> dict[str, dict]:
    """{card (", decode path" where the row names one): {"pace": {(method, data set): seconds per
    question}, "per_call": {(method, data set): seconds per model call, where the row counts its
    calls}, "rows": provenance records}} from the measured-pace file: each card's newest row (by
    commit date, then file order) per method and data set at `settings` (the profile whose
    per-question settings the row ran)."""
    df = _read(MEASURED_PACE if path is None else path, MEASURED_COLUMNS, "measured GPU pace")
    df = df[df["settings"] == settings].sort_values("commit_date", kind="stable")
    calls = df[CALLS_COLUMN] if CALLS_COLUMN in df else pd.Series(float("nan"), index=df.index)
    paths = df[PATH_COLUMN].fillna("") if PATH_COLUMN in df else pd.Series("", index=df.index)
    out: dict[str, dict] = {}
    for (card, decode), rows in df.groupby([df["card"], paths], sort=True):
        rows = rows.drop_duplicates(["method", "dataset"], keep="last")
        keys = list(zip(rows["method"], rows["dataset"]))
        out[f"{card}, {decode}" if decode else card] = {
            "pace": {k: float(v) for k, v in zip(keys, rows["seconds_per_question"])},
            "per_call": {k: float(s) / float(c) for k, s, c in
                         zip(keys, rows["seconds_per_question"], calls[rows.index]) if c == c and c > 0},
            "rows": rows.to_dict("records")}
    return out


def _fixed_seconds(df: pd.DataFrame, rows: pd.DataFrame) -> dict[str, float]:
    """{step: the seconds it takes whatever its work (kernel, imports, model load)}: where the newest
    run of another profile on the same machine recorded the step's calls too, the intercept of the
    line through the two runs' (computed prompt tokens, seconds), kept when it lies in [0, the
    smaller run's seconds); elsewhere none is known (0)."""
    first = rows.iloc[0]
    other = df[(df["machine"] == first["machine"]) & (df["profile"] != first["profile"])]
    if other.empty:
        return {}
    other = other[other["run"] == other["run"].iloc[-1]].set_index("step")
    out = {}
    for step, secs, tokens, unit in zip(rows["step"], rows["seconds"], rows["prompt_tokens"], rows["unit"]):
        if unit != PER_CALL or step not in other.index or other.at[step, "unit"] != PER_CALL:
            continue
        secs2, tokens2 = float(other.at[step, "seconds"]), float(other.at[step, "prompt_tokens"])
        if tokens2 != tokens:
            fixed = secs - (secs - secs2) / (tokens - tokens2) * tokens
            if 0 <= fixed < min(secs, secs2):
                out[step] = fixed
    return out


def cpu_paces(profile: str, path=None) -> dict | None:
    """The newest recorded CPU run of `profile`: {"run", "commit", "machine", "note", "steps":
    {step: {"seconds", "unit", "units" (computed calls, or 1), "fixed" (of the seconds, those the
    step takes whatever its work: `_fixed_seconds`), "per_unit" (the rest over its units), "off"}}},
    or None."""
    everything = _read(CPU_PACE if path is None else path, CPU_COLUMNS, "measured CPU pace")
    df = everything[everything["profile"] == profile]
    if df.empty:
        return None
    rows = df[df["run"] == df["run"].iloc[-1]]              # the last run recorded, all its steps
    first, fixed = rows.iloc[0], _fixed_seconds(everything, rows)
    return {"run": first["run"], "commit": str(first["commit"]), "machine": first["machine"], "note": first["note"],
            "steps": {s: {"seconds": float(sec), "unit": u, "units": n, "fixed": fixed.get(s, 0.0),
                          "per_unit": (float(sec) - fixed.get(s, 0.0)) / n, "off": o if o == o else "not checked"}
                      for s, sec, u, c, o in zip(rows["step"], rows["seconds"], rows["unit"],
                                                 rows["computed_calls"], rows["off"])
                      for n in [float(c) if u == PER_CALL else 1.0]}}


def recorded_decisions(cfg: Config, path=None) -> dict[str, dict]:
    """{model the profile runs (its own, its backbones): the synthetic model's decisions
    (`work.decisions`) as the newest recorded run of `cfg.profile` took them for that model, else the
    newest run of another profile on it, with "source" naming the run} (a model no run recorded
    left out)."""
    df = _read(DECISIONS if path is None else path, DECISION_COLUMNS, "recorded decisions")
    out = {}
    for model in dict.fromkeys([cfg["model.name"], *(cfg.get("backbones.models", []) or [])]):
        same = df[df["model"] == model]
        own = same[same["profile"] == cfg.profile]
        if not (rows := own if not own.empty else same).empty:
            row = rows.iloc[-1]
            whose = "" if row["profile"] == cfg.profile else f", profile {row['profile']}"
            out[model] = {**{k: float(row[k]) for k in DECISION_COLUMNS[3:]}, "source": f"{row['run']}{whose}"}
    return out


def on_cpu(cfg: Config) -> bool:
    """Whether the profile's model runs on a CPU: `model.device` cpu, or auto on a machine whose
    torch sees no GPU (a profile set to cuda runs on a GPU, wherever it is priced)."""
    device = cfg.get("model.device", "auto")
    if device != "auto":
        return device == "cpu"
    from ..core.device import resolve_device

    return resolve_device(device) == "cpu"


def record_pace(cfg: Config, note: str, machine: str, commit: str) -> Path:
    """Append the finished run of `cfg.profile` to `CPU_PACE` (per step: seconds, work, unit, and
    how far the pace recorded before was off on this work) and its decisions to `DECISIONS`."""
    from .work import decisions, recorded_work, step_seconds

    seconds = step_seconds(res := RESULTS_ROOT / cfg.profile)
    if not seconds:
        raise UserError(f"no finished step of profile '{cfg.profile}' in {res}",
                        setting="--record-pace", fix="run `make reproduce` for the profile first")
    work = recorded_work(cfg, res).eval("computed = llm_calls - llm_cache_hits")
    done = work[work["step"].isin(seconds)].groupby("step")[["computed", "computed_prompt_tokens",
                                                              "computed_tokens"]].sum(min_count=1)
    if done.isna().any(axis=None):
        raise UserError("the run's files do not count the calls of " + ", ".join(done.index[done.isna().any(axis=1)]),
                        setting="--record-pace", fix="record a run made by this version of the package")
    before = cpu_paces(cfg.profile)
    rows = []
    for step, secs in sorted(seconds.items()):
        calls = float(done["computed"].get(step, 0.0))
        unit, units = (PER_CALL, calls) if calls > 0 else (PER_STEP, 1.0)
        old = (before or {"steps": {}})["steps"].get(step)
        off = "first record of this step" if old is None or old["unit"] != unit else \
            f"{secs / (old['fixed'] + old['per_unit'] * units) - 1:+.0%} against {before['run']}"
        rows.append({"profile": cfg.profile, "run": f"{cfg.profile} {commit} {time.strftime('%Y-%m-%d')}",
                     "commit": commit, "machine": machine, "step": step, "seconds": secs, "unit": unit,
                     "computed_calls": int(calls), "prompt_tokens": int(done["computed_prompt_tokens"].get(step, 0)),
                     "generated_tokens": int(done["computed_tokens"].get(step, 0)), "off": off, "note": note})
    _append(CPU_PACE, CPU_COLUMNS, "measured CPU pace", rows)
    if rates := decisions(cfg, res):
        _append(DECISIONS, DECISION_COLUMNS, "recorded decisions", [{
            "profile": cfg.profile, "run": rows[0]["run"], "model": model, **{k: round(v, 4) for k, v in r.items()}}
            for model, r in rates.items()])
    return CPU_PACE


def _append(path: Path, columns: tuple, what: str, rows: list[dict]) -> None:
    old = _read(path, columns, what) if path.is_file() else None
    pd.concat([old, pd.DataFrame(rows)], ignore_index=True)[list(columns)].to_csv(path, index=False)
