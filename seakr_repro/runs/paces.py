"""The paces `cost` prices a profile's model calls at, each with where it was measured:

- the paper's Table 7 (seconds per question of FLARE, DRAGIN and SeaKR on 2Wiki and HotpotQA,
  4x GeForce 3090, vLLM): for the paper's model only (`pace_applies`), for the methods it timed;
- the GPU paces this package measured (`data/measured/gpu_pace.csv`: one row per card, commit,
  method and data set, with what ran; a later GPU run adds rows): `measured_paces` gives each
  card's newest rows at the paper's settings; a row that counts its model calls per question
  (`llm_calls_per_question`) gives the card's seconds per call, which prices every step's calls
  on that card. Random weights run every generation to its limit, so those are upper bounds;
- the CPU paces of this package's own runs (`data/measured/cpu_pace.csv`: one row per profile,
  run and step: its seconds and the model calls it computed): each step's seconds per computed
  call, for the same profile on a CPU. `cost --record-pace` adds a finished run's rows, from its
  step stamps (seconds) and its files' call counts (`commands.recorded_work`).
"""
from __future__ import annotations

import pandas as pd

from ..core.config import Config
from ..core.paths import DATA_DIR

PACE_TABLE = "seakr_table7"
# The committed files of measured paces (a test points these at files of its own, so a row a run
# appends never changes what it checks)
MEASURED_PACE = DATA_DIR / "measured" / "gpu_pace.csv"
MEASURED_COLUMNS = ("card", "commit_date", "commit", "torch", "dtype", "weights", "what_ran", "settings",
                    "method", "dataset", "seconds_per_question", "note")
CALLS_COLUMN = "llm_calls_per_question"       # optional: the model calls of the row's questions
CPU_PACE = DATA_DIR / "measured" / "cpu_pace.csv"
CPU_COLUMNS = ("profile", "run", "commit", "machine", "step", "seconds", "computed_calls", "calls_from", "note")


def _read(path, columns: tuple, what: str, fix: str) -> pd.DataFrame:
    from ..core.errors import DataMissingError, UserError

    try:
        df = pd.read_csv(path, dtype={"commit": str})
    except FileNotFoundError:
        raise DataMissingError(f"the {what} file is missing", path=path, fix=fix) from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"columns {missing} are missing", path=path,
                        fix=f"give it the columns {', '.join(columns)}")
    return df


def measured_paces(settings: str = "paper", path=None) -> dict[str, dict]:
    """{card: {"pace": {(method, data set): seconds per question}, "per_call": {(method, data
    set): seconds per model call, where the row counts its calls}, "rows": provenance records}}
    from the measured-pace file: each card's newest row (by commit date, then file order) per
    method and data set at `settings` (the profile whose per-question settings the row ran)."""
    df = _read(MEASURED_PACE if path is None else path, MEASURED_COLUMNS, "measured GPU pace",
               "restore it from git (git checkout -- data/measured)")
    df = df[df["settings"] == settings].sort_values("commit_date", kind="stable")
    calls = df[CALLS_COLUMN] if CALLS_COLUMN in df else pd.Series(float("nan"), index=df.index)
    out: dict[str, dict] = {}
    for card, rows in df.groupby("card", sort=True):
        rows = rows.drop_duplicates(["method", "dataset"], keep="last")
        keys = list(zip(rows["method"], rows["dataset"]))
        out[card] = {"pace": {k: float(v) for k, v in zip(keys, rows["seconds_per_question"])},
                     "per_call": {k: float(s) / float(c) for k, s, c in
                                  zip(keys, rows["seconds_per_question"], calls[rows.index]) if c == c and c > 0},
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


def cpu_paces(profile: str, path=None) -> dict | None:
    """The newest recorded run of `profile` on a CPU (`CPU_PACE`): {"run", "commit", "machine",
    "calls_from", "note", "steps": {step: {"seconds", "computed_calls"}}}, or None."""
    df = _read(CPU_PACE if path is None else path, CPU_COLUMNS, "measured CPU pace",
               "restore it from git (git checkout -- data/measured)")
    df = df[df["profile"] == profile]
    if df.empty:
        return None
    run = df["run"].iloc[-1]                   # the last run recorded, all its steps
    rows = df[df["run"] == run]
    first = rows.iloc[0]
    return {"run": run, "commit": str(first["commit"]), "machine": first["machine"],
            "calls_from": first["calls_from"], "note": first["note"],
            "steps": {s: {"seconds": float(sec), "computed_calls": float(c)}
                      for s, sec, c in zip(rows["step"], rows["seconds"], rows["computed_calls"])}}


def on_cpu(cfg: Config) -> bool:
    """Whether the profile's model runs on a CPU: `model.device` cpu, or auto on a machine whose
    torch sees no GPU (a profile set to cuda runs on a GPU, wherever it is priced)."""
    device = cfg.get("model.device", "auto")
    if device != "auto":
        return device == "cpu"
    from ..core.device import resolve_device

    return resolve_device(device) == "cpu"
