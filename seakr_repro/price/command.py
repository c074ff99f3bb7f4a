"""`python -m seakr_repro cost`: what a profile's `make reproduce` costs per notebook, table, method
and data set, before it runs, and beside a run's files once they are there. The dry run's work is
kept under <cache>/cost/ per profile, settings, sample, replayed cache, decisions and code
(`--refresh` runs it again); `status` shows the latest beside a run; `--record-pace` keeps a
finished CPU run's pace (`paces.record_pace`)."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pandas as pd

from ..core.config import Config
from ..core.paths import CACHE_DIR, PACKAGE_ROOT, RESULTS_ROOT, repo_relative

PREDICTIONS = "cost"              # under the cache folder: one file per prediction, one "latest" per profile
STAND_IN_SAMPLE = 5               # questions per data set and step where the profile's sets are not here


def _code_fingerprint() -> str:
    """The package's source: a prediction made by other code is made again."""
    h = hashlib.sha256()
    for path in sorted((PACKAGE_ROOT / "seakr_repro").rglob("*.py")):
        h.update(path.relative_to(PACKAGE_ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def checkout_commit() -> str:
    """The checkout's short commit, "+changes" when its code differs from it."""
    from ..core.provenance import git_revision

    rev = git_revision()
    return rev["revision"][:7] + ("+changes" if rev["dirty"] else "")


def _key(cfg: Config, overrides: dict, sample: int | None, replay: Path | None, decisions: dict | None,
         seeds: int) -> str:
    blob = json.dumps({"profile": cfg.profile, "config": cfg.data, "overrides": overrides, "sample": sample,
                       "replay": str(replay) if replay else None, "decisions": decisions, "seeds": seeds,
                       "code": _code_fingerprint()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def predict(cfg: Config, overrides: dict, sample: int | None = None, replay: Path | None = CACHE_DIR,
            refresh: bool = False, verbose: bool = False, seeds: int = 1) -> dict:
    """The dry run's work for `cfg` with its key, commit, time, a sample's calibration sizes and the
    decisions it took: the profile's run files' here, else a recorded run's."""
    from ..core.io import read_json, write_json
    from . import dry_run
    from .paces import recorded_decisions
    from .work import calibration_sizes, decisions

    if sample is None and not dry_run.runs_here(cfg):
        sample = STAND_IN_SAMPLE       # look-alikes: a sample, scaled to the profile's sizes
    rates = decisions(cfg, RESULTS_ROOT / cfg.profile)
    source = dict.fromkeys(rates, "the profile's run files here")
    for model, recorded in recorded_decisions(cfg).items():      # a model the run files lack
        if model not in rates:
            source[model] = recorded.pop("source")
            rates[model] = recorded
    key = _key(cfg, overrides, sample, replay, rates, seeds)
    path = CACHE_DIR / PREDICTIONS / f"{key}.json"
    if path.is_file() and not refresh:
        got = read_json(path)
    else:
        t0 = time.perf_counter()
        got = dry_run.run(cfg, overrides, sample, replay if replay and Path(replay).is_dir() else None,
                          quiet=not verbose, decisions=rates, seeds=seeds)
        got.update(key=key, profile=cfg.profile, made=time.strftime("%Y-%m-%d %H:%M:%S"),
                   commit=checkout_commit(), dry_run_seconds=round(time.perf_counter() - t0, 1),
                   replay_cache=str(replay) if replay and got["replay"]["replayed"] else None,
                   overrides=overrides, decisions=rates, decisions_source=source,
                   calibration=calibration_sizes(cfg) if sample is not None else None)
        write_json(path, got)
    write_json(CACHE_DIR / PREDICTIONS / f"latest-{cfg.profile}.json", got)
    return got


def latest_prediction(profile: str) -> dict | None:
    """The last prediction `cost` made for `profile` here, or None."""
    from ..core.io import read_json

    path = CACHE_DIR / PREDICTIONS / f"latest-{profile}.json"
    try:
        return read_json(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _skipped_here(cfg: Config, units: pd.DataFrame) -> list[str]:
    """Per unit, why this machine skips it ("" where it runs): its model is not here while the
    profile's own is (else the whole profile is a projection, every row priced)."""
    from ..artifacts import SELF_RAG_MODEL
    from ..runs.preflight import missing_models

    problems = missing_models(cfg)
    if cfg["model.name"] in problems:
        return [""] * len(units)
    return [problems.get(SELF_RAG_MODEL if method == "self_rag" else run.split(":", 1)[-1]) or ""  # a backbone's row
            for method, run in zip(units["method"], units["run"])]


def priced(cfg: Config, got: dict) -> tuple[pd.DataFrame, dict]:
    """(every unit priced, what priced them: {"cpu", "cards", "table7"})."""
    from ..runs.preflight import pace_applies, paper_pace
    from . import estimate as cost
    from . import paces

    work = cost.answered_for(cfg, pd.DataFrame(got["work"]), got.get("stand_ins"))
    units = cost.scale(cfg, work, got.get("calibration"))
    units["skipped here"] = _skipped_here(cfg, units)
    on_cpu = paces.on_cpu(cfg)
    cpu = paces.cpu_paces(cfg.profile) if on_cpu else None
    cards = {} if on_cpu else paces.measured_paces("paper-tiny" if cfg.profile == "paper-tiny" else "paper")
    table7 = paper_pace() if pace_applies(cfg) and not on_cpu else None
    # a skipped row costs nothing here (a recorded run skipped it too: its seconds are the others')
    run = cost.price(cfg, units[units["skipped here"] == ""], cpu, cards, table7)
    skipped = units[units["skipped here"] != ""].assign(pace="skipped here")
    out = pd.concat([run, skipped], ignore_index=True).sort_values("step", kind="stable", ignore_index=True)
    out["skipped here"] = out["skipped here"].fillna("")
    return out, {"cpu": cpu, "cards": cards, "table7": table7}


def _int(x) -> str:
    return "" if x != x else f"{x:,.0f}"


def _hours(h) -> str:
    return "no pace" if h != h else f"{h:,.2f}" if h < 10 else f"{h:,.1f}"


def summary_table(units: pd.DataFrame) -> pd.DataFrame:
    """Per notebook: question-runs, the work, and each pace's hours (with the question-runs it
    prices where that is not all)."""
    from .estimate import HOURS, notebooks, pace_columns

    nb = notebooks(units[units["skipped here"] == ""])
    with_se = lambda c, e: f"{c:,.0f} ± {e:,.0f}" if e >= 0.5 else _int(c)   # noqa: E731
    out = pd.DataFrame({"notebook": nb["step"], "question-runs": nb["question_runs"].map(_int),
                        "calls": list(map(with_se, nb["calls"], nb["calls_se"])),
                        "unique": list(map(with_se, nb["unique"], nb["unique_se"])),
                        "derived rows": nb["derived"].map(_int),
                        "prompt tokens": nb["prompt_tokens"].map(_int),
                        "generated tokens": nb["generated_tokens"].map(_int)})
    for col in pace_columns(nb):
        at = nb["question-runs at " + col[len(HOURS):]]
        out[col] = [_hours(h) + (f" ({a:,.0f} of {q:,.0f} q-runs)" if h == h and a < q else "")
                    for h, a, q in zip(nb[col], at, nb["question_runs"])]
    if not pace_columns(nb):
        out["hours"] = "no pace"
    return out


def as_json(cfg: Config, got: dict, units: pd.DataFrame, used: dict) -> dict:
    """The same figures as the text, as JSON: per notebook and in all (each pace's hours apart,
    with the question-runs it prices)."""
    from .estimate import HOURS, WORK, notebooks, pace_columns

    run = units[units["skipped here"] == ""]
    total = {k: float(run[k].sum()) for k in ["question_runs"] + WORK}
    total["calls_saved_by_sharing"] = total["calls"] - total["unique"]
    total["hours"] = {col[len(HOURS):]: {"hours": float(run[col].sum()),
                                         "question_runs": float(run["question_runs"].where(run[col].notna(), 0).sum())}
                      for col in pace_columns(run)}
    return {"profile": cfg.profile, "covers": COVERS, "leaves_out": leaves_out(units, used),
            "made": got.get("made"), "commit": got.get("commit"), "sample": got.get("sample"),
            "replay": got.get("replay"), "replay_cache": got.get("replay_cache"),
            "decisions": got.get("decisions"), "decisions_source": got.get("decisions_source"),
            "paces": pace_notes(used, units),
            "notebooks": json.loads(notebooks(run).to_json(orient="records")),
            "units": json.loads(units.to_json(orient="records")), "total": total}


COVERS = ("every step with model calls (02-11) per notebook, table, method and data set: question-runs, "
          "model calls made, calls unique (computed; the rest the call cache serves), rows derived from "
          "another run's file (no call made), prompt tokens pre-filled and tokens generated by the unique "
          "calls, hours at a pace")


def leaves_out(units: pd.DataFrame, used: dict) -> list[str]:
    out = ["steps 00, 01, 03, 08 and 90 make no model calls: " + (
               "each at its recorded seconds" if used.get("cpu") else
               "no pace prices them (on a GPU: step 01's BM25 index of the corpus, a CPU job of its own)"),
           "make setup (installing the environment)",
           "the hidden states step 02 and 11 read at every layer (one forward pass per sample, not a "
           "counted call; on a CPU its time is in the step's pace per call)",
           "KBAE's LoRA training (notebook 10: on a CPU in the step's pace per call; no GPU pace)"]
    skipped = sorted({f"{r} ({why.split(' (fix')[0]})" for r, why in zip(units["run"], units["skipped here"]) if why})
    if skipped:
        out.append("rows this machine will skip, for a model it lacks: " + "; ".join(skipped))
    unknown = units[(units["skipped here"] == "") & units["calls"].isna()]
    if not unknown.empty:
        out.append(f"{unknown['question_runs'].sum():,.0f} question-runs the dry run could not answer, so their "
                   "calls are not counted: " + ", ".join(sorted(set(unknown["run"]))) + " (a row its steps "
                   "skipped: e.g. SKR's learned variants where the synthetic model left no usable label)")
    return out


def pace_notes(used: dict, units: pd.DataFrame) -> list[str]:
    """What each pace is, and what it prices."""
    from .estimate import HOURS

    notes = []
    cpu = used.get("cpu")
    if cpu:
        steps = "; ".join(f"{s} {r['per_unit']:.3g} s per {r['unit']}"
                          + (f" + {r['fixed']:.0f} s fixed" if r["fixed"] else "") + f" (off: {r['off']})"
                          for s, r in cpu["steps"].items())
        notes.append(f"CPU: {cpu['run']} ({cpu['machine']}; data/measured/cpu_pace.csv): {steps}")
    if used.get("table7"):
        notes.append("Table 7: the paper's seconds per question of FLARE, DRAGIN and SeaKR (4x GeForce "
                     "3090, vLLM; ARITHMETIC, not measured here) over the calls per question this "
                     "profile's step 09 makes; those three methods only")
    for card, got in (used.get("cards") or {}).items():
        if not got.get("per_call"):
            continue
        col = units.get(HOURS + f"GPU: {card}", pd.Series(dtype=float))
        none = sorted(set(units.loc[col.isna() & (units["skipped here"] == ""), "method"]) - {""})
        commits = ", ".join(sorted({str(r["commit"]) for r in got["rows"]}))
        notes.append(f"GPU: {card}: {', '.join(f'{m} {d} {s:.2f} s/call' for (m, d), s in got['per_call'].items())}"
                     f" (commit {commits}, data/measured/gpu_pace.csv; random weights run every generation to "
                     "its limit, so each call's seconds are an upper bound, the total is not): each method's "
                     "calls at its own rows only; no GPU pace: " + (", ".join(none) or "none"))
    return notes or ["none: no CPU run of this profile is recorded and no GPU pace applies"]


def report(cfg: Config, got: dict, units: pd.DataFrame, used: dict, runs: bool = False,
           workers: int | None = None) -> str:
    """The text `cost` prints."""
    from ..runs.preflight import spread
    from .estimate import pace_columns

    j = as_json(cfg, got, units, used)
    t = j["total"]
    made = sum((got.get("replay") or {}).values())
    replayed = (got.get("replay") or {}).get("replayed", 0)
    src = (f"{replayed:,} of its {made:,} computed calls replayed from the real model's call cache "
           f"({repo_relative(got['replay_cache'])}), the other {made - replayed:,} the synthetic model's"
           if got.get("replay_cache") else "every computed call the synthetic model's")
    rates = got.get("decisions") or {}
    src += " (its decisions " + ("; ".join(
        f"for {model} at the rates of {got['decisions_source'][model]}: U past its threshold "
        f"{r['retrieve_rate']:.0%} of SeaKR's steps; {r['newline_rate']:.0%} of reasoning steps open "
        f"with a newline; an answer in {r['answer_rate']:.0%} of the others, {r['words']:.0f} words a step"
        for model, r in rates.items()) or "at its own rates: no run of its models recorded") + ")"
    if got.get("seeds", 1) > 1:
        src += f", the mean of {got['seeds']} draws of those decisions"
    sample = ("every question of every step" if got.get("sample") is None else
              f"at most {got['sample']} questions per data set and step, scaled to the profile's sizes "
              "(± one standard error of that sample)")
    parts = [f"[cost] profile {cfg.profile}: {COVERS}. Counted by cost's dry run (the profile's own "
             f"steps on the synthetic model behind the real call cache; {sample}; {src}). Left out: "
             + "; ".join(j["leaves_out"]) + ".", ""]
    if runs:
        cols = ["step", "table", "run", "method", "dataset", "question_runs", "calls", "unique", "derived",
                "prompt_tokens", "generated_tokens", *pace_columns(units), "pace", "skipped here"]
        parts += [units[cols].round(3).to_markdown(index=False), ""]
    parts.append(summary_table(units).to_markdown(index=False))
    line = (f"\n[cost] in all: {t['question_runs']:,.0f} question-runs, {t['calls']:,.0f} model calls, "
            f"{t['unique']:,.0f} unique (the call cache serves the other {t['calls_saved_by_sharing']:,.0f}: "
            f"work two rows or steps share, counted once), {t['derived']:,.0f} rows derived, "
            f"{t['prompt_tokens']:,.0f} prompt tokens pre-filled, {t['generated_tokens']:,.0f} tokens "
            "generated; hours, each pace apart: ")
    at = []
    for name, got_h in t["hours"].items():
        of = "" if got_h["question_runs"] >= t["question_runs"] else \
            f" for {got_h['question_runs']:,.0f} of the {t['question_runs']:,.0f} question-runs"
        text = f"{name}: {got_h['hours']:,.2f} hours ({got_h['hours'] * 60:,.0f} minutes){of}"
        if workers:
            text += (f", over {workers} Ray workers {spread(got_h['hours'], workers):,.2f} hours of wall time "
                     "(ARITHMETIC: each worker assumed to keep the pace, the questions divided evenly)")
        at.append(text)
    parts.append(line + ("; ".join(at) if at else "no pace applies (\"no pace\" above)"))
    parts += ["[cost] pace: " + p for p in j["paces"]]
    return "\n".join(parts)


def beside_run(cfg: Config, units: pd.DataFrame) -> pd.DataFrame | None:
    """Predicted beside actual per notebook (`estimate.beside`), when the profile's run has files
    here; None when it has none."""
    from .estimate import beside, notebooks
    from .work import recorded_work, step_seconds

    res = RESULTS_ROOT / cfg.profile
    if not (res / "stamps").is_dir() and not (res / "runs").is_dir():
        return None
    return beside(notebooks(units[units["skipped here"] == ""]), recorded_work(cfg, res), step_seconds(res))


def beside_text(cfg: Config, got: dict, table: pd.DataFrame) -> str:
    shown = table.copy()
    for col in shown.columns[1:]:
        shown[col] = [("" if v != v else f"{v:.2f}") if "/" in col else _int(v) for v in shown[col]]
    return (f"[cost] predicted ({got.get('made')}, commit {got.get('commit')}) beside what the run in "
            f"{repo_relative(RESULTS_ROOT / cfg.profile)} recorded (its run files' llm_calls and "
            "llm_cache_hits, rows derived from another run's file apart, steps 02 and 11's per-question "
            "counts, step 10's training_calls.json; seconds from its step stamps):\n" + shown.to_markdown(index=False))
