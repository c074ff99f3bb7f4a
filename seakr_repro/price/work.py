"""The model work a run recorded in its files, per step and unit: questions, calls (cache hits
among them), prompt and generated tokens (`llm.cache.ROW_FIELDS`), and rows derived from another
run's file (`runs.derived`: no call). Each step counts per question, so a resumed step keeps its
finished questions' counts: steps 04-07, 09 and 10 in each run file's rows (a row belongs to the
first step, in notebook order, that asks its question: 04, 06 and 10 share SeaKR's files); step 02
and Table 4's calibrations in questions.jsonl; step 10's training in training_calls.json; step 11
in trials.jsonl. `cost` reads a real run's files and its dry run's alike; files older than the
counts leave them NaN."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from ..artifacts import EXTRACTION, MECHANISMS, SEED_STEP, table
from ..core.config import Config
from ..llm.cache import ROW_FIELDS
from ..runs.plan import PlannedRun, label_method, notebook_parameter, planned_runs, run_file, step_cap

UNIT = ["step", "table", "run", "method", "dataset"]
COUNTS = list(ROW_FIELDS)
# sums of squares of each question's calls and computed calls (how much questions differ: the
# uncertainty of a sample's mean)
SPREAD = ["calls_sq", "computed_sq"]
COLUMNS = UNIT + ["questions"] + COUNTS + SPREAD + ["derived"]
CALIBRATION = "calibration"          # the data set column of a calibration unit (02, 07)


def _unit(step, table, run, method, dataset, questions=0, counts=None) -> dict:
    spread = dict.fromkeys(SPREAD, 0 if counts is None else float("nan"))
    return {"step": step, "table": table, "run": run, "method": method, "dataset": dataset,
            "questions": questions, **(counts or dict.fromkeys(COUNTS, 0)), **spread, "derived": 0}


def _add(unit: dict, counts: dict | None) -> None:
    """One question's counts into its unit (a question without counts makes them unknown; a row
    derived from another run's file counts as derived, its calls the source's)."""
    unit["questions"] += 1
    if counts and counts.get("derived_from"):
        unit["derived"] += 1
        return
    got = {f: (counts or {}).get(f, float("nan")) for f in COUNTS}
    for f in COUNTS:
        unit[f] += got[f]
    unit["calls_sq"] += got["llm_calls"] ** 2
    unit["computed_sq"] += (got["llm_calls"] - got["llm_cache_hits"]) ** 2


def _prepared_ids(res: Path, dataset: str) -> list[str]:
    path = res / "data" / f"{dataset}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [json.loads(line)["id"] for line in lines if line.strip()]


def _jsonl(path: Path) -> list[dict]:
    """The finished lines of a step's file (a torn last line, a write in progress, left out)."""
    from ..core.errors import UserError
    from ..runs.runner import read_results

    try:
        return read_results(path) if path.is_file() else []
    except UserError:          # damaged mid-file: `status` names it; its counts are unknown here
        return [{}]


def run_units(cfg: Config, res: Path) -> list[dict]:
    """The runs' units: one per planned run (step, label, data set), with the rows it wrote."""
    from ..data.records import sample

    planned = planned_runs(cfg)
    seed = cfg["datasets.sample_seed"]
    asked: dict[tuple[str, str], set] = {}
    for run in planned:          # the questions each step asks of a data set (select_questions)
        if (run.step, run.dataset) not in asked:
            ids = _prepared_ids(res, run.dataset)
            cap = step_cap(cfg, run.step)
            asked[(run.step, run.dataset)] = set(sample(ids, min(cap, len(ids)) if cap is not None else None, seed))
    units: dict[PlannedRun, dict] = {run: _unit(run.step, _table(run.step), run.label, label_method(cfg, run.label),
                                                run.dataset) for run in planned}
    shared: dict[tuple[str, str], list[PlannedRun]] = {}
    for run in planned:
        shared.setdefault((run.folder, run.label), []).append(run)
    for runs in shared.values():
        path = run_file(res, runs[0])
        owner: dict[str, PlannedRun] = {}
        for run in runs:          # notebook order: the first step to ask for a question wrote it
            for qid in asked[(run.step, run.dataset)]:
                owner.setdefault(qid, run)
        for row in (_jsonl(path) if path is not None else []):
            if row.get("id") in owner:
                _add(units[owner[row["id"]]], row if "llm_calls" in row else None)
    return list(units.values())


def _table(step: str) -> str:
    from ..artifacts import TABLES

    return next((t.key for t in TABLES.values() if t.step == step), "seed")


def _calibration_ids(cfg: Config, step: str, fanout: str, bundled: str) -> set[str]:
    from ..steps.extraction import calibration_records

    return {r.id for r in calibration_records(notebook_parameter(cfg, step, fanout),
                                              notebook_parameter(cfg, step, bundled), seed=cfg["seed"])}


def calibration_sizes(cfg: Config) -> dict[str, int]:
    """{calibration unit's run: its questions} at the profile's sizes (step 02's, each other
    backbone's in step 07)."""
    sizes = {"extraction": len(_calibration_ids(cfg, EXTRACTION, "N_FANOUT", "N_BUNDLED"))}
    backbone = len(_calibration_ids(cfg, table("table4").step, "N_CAL_FANOUT", "N_CAL_BUNDLED"))
    sizes.update({f"calibration:{m}": backbone for m in cfg.get("backbones.models", []) or []
                  if m != cfg["model.name"]})
    return sizes


def _extraction_unit(cfg: Config, res: Path, step: str, run: str, tag: str | None, fanout: str,
                     bundled: str) -> dict:
    from ..steps.extraction import extraction_dir

    ids = _calibration_ids(cfg, step, fanout, bundled)
    unit = _unit(step, "table4" if tag else CALIBRATION, run, "extraction", CALIBRATION)
    seen = set()
    for row in _jsonl(extraction_dir(cfg, tag, res) / "questions.jsonl"):
        if row.get("id") in ids and row["id"] not in seen:
            seen.add(row["id"])
            _add(unit, row.get("calls"))
    return unit


def calibration_units(cfg: Config, res: Path) -> list[dict]:
    """Step 02's calibration set, and each other backbone's calibration in step 07."""
    units = [_extraction_unit(cfg, res, EXTRACTION, "extraction", None, "N_FANOUT", "N_BUNDLED")]
    backbones = table("table4").step
    primary = cfg["model.name"]
    for model in cfg.get("backbones.models", []) or []:
        if model != primary:         # the profile's own model takes step 03's delta
            units.append(_extraction_unit(cfg, res, backbones, f"calibration:{model}", model,
                                          "N_CAL_FANOUT", "N_CAL_BUNDLED"))
    return units


def training_units(res: Path) -> list[dict]:
    """Step 10's training work, as its training_calls.json records it."""
    from ..steps.seed_methods import TRAINING_CALLS

    path = res / SEED_STEP / TRAINING_CALLS
    records = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    return [_unit(SEED_STEP, "seed", r["work"], r["work"], r["dataset"], r.get("questions", 0),
                  {f: r.get(f, float("nan")) for f in COUNTS}) for r in records]


def mechanisms_set(cfg: Config) -> str:
    """The data set step 11 asks its questions of."""
    return notebook_parameter(cfg, MECHANISMS, "DATASET") or cfg["datasets.simple"][0]


def trial_units(cfg: Config, res: Path) -> list[dict]:
    """Step 11's trials (one per question of its data set)."""
    unit = _unit(MECHANISMS, "mechanisms", "trials", "mechanisms", mechanisms_set(cfg))
    for row in _jsonl(res / MECHANISMS / "trials.jsonl"):
        _add(unit, row.get("calls"))
    return [unit]


def recorded_work(cfg: Config, res: Path) -> pd.DataFrame:
    """Every unit of model work the profile plans, with what the run's files in `res` record of it:
    one row per unit (`COLUMNS`), a unit not run yet with 0 questions."""
    res = Path(res)
    rows = calibration_units(cfg, res) + run_units(cfg, res) + training_units(res) + trial_units(cfg, res)
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.sort_values("step", kind="stable", ignore_index=True)


def step_seconds(res: Path) -> dict[str, float]:
    """{step: seconds} of the steps whose stamp (`reproduce`'s record of a finished step) says so."""
    out = {}
    for stamp in sorted((Path(res) / "stamps").glob("*.json")):
        try:
            seconds = json.loads(stamp.read_text(encoding="utf-8")).get("seconds")
        except (OSError, ValueError):
            continue
        if isinstance(seconds, (int, float)):
            out[stamp.stem] = float(seconds)
    return out


def _decides(entry: dict) -> bool:
    """Whether SeaKR's U decided this trace entry: a reasoning step that said something (an empty
    one retrieves whatever U is) or simple QA's direct answer."""
    if entry.get("kind") == "pseudo_step":
        return bool((entry.get("output") or "").strip())
    return entry.get("kind") == "direct" and entry.get("u") is not None and entry.get("delta") is not None


def _run_files(cfg: Config, res: Path):
    """(model, path) of each current run file in `res`: a backbone's row its model's, a method on
    its own checkpoint (Self-RAG) that one's, every other row the profile's model's."""
    from ..artifacts import find_method
    from ..core.io import read_json
    from ..runs.runner import CURRENT_NAME

    backbones = set(cfg.get("backbones.models", []) or [])
    for record in sorted((Path(res) / "runs").glob(f"*/{CURRENT_NAME}")):
        for label, name in read_json(record).items():
            known = find_method(label)
            yield (label if label in backbones else known.model if known and known.model else cfg["model.name"],
                   record.parent / name)


def decisions(cfg: Config, res: Path) -> dict[str, dict]:
    """{model: the synthetic model's decisions (`llm.synthetic.DECISIONS`) as the traces in `res`
    record that model's} (a model without traces left out): the share of SeaKR's decisions
    (`_decides`) whose U passed its threshold (retrieve_rate); of the steps a loop keeps, the share
    empty or opening with a newline (newline_rate: a "\n" stop empties it, ending the loop), and of
    the others the share that states an answer and their mean words; counted as read, each
    distinct step once."""
    answer, loop = re.compile(r"answer is", re.IGNORECASE), {"step", "cot", "rerank"}
    counts: dict[str, dict] = {}
    seen = set()         # a step another row shares (an ablation's cache hit) counts once
    for model, path in _run_files(cfg, res):
        n = counts.setdefault(model, dict.fromkeys(("steps", "retrieved", "kept", "newline", "said", "answers",
                                                    "words"), 0))
        for row in _jsonl(path):
            if row.get("derived_from"):
                continue
            for entry in row.get("trace") or []:
                out = entry.get("output")
                key = hash((model, row.get("id"), entry.get("kind"), entry.get("prompt_chars"), out))
                if key in seen:
                    continue
                seen.add(key)
                if _decides(entry):
                    n["steps"] += 1
                    n["retrieved"] += bool(entry.get("retrieve")) if entry["kind"] == "pseudo_step" \
                        else not entry["u"] < entry["delta"]
                if (entry.get("kind") in loop or entry.get("retrieve") is False) and isinstance(out, str):
                    n["kept"] += 1
                    n["newline"] += not out.strip() or out.startswith("\n")
                    if out.strip():
                        n["said"] += 1
                        n["answers"] += bool(answer.search(out))
                        n["words"] += len(out.split())
    return {model: {"retrieve_rate": n["retrieved"] / n["steps"], "answer_rate": n["answers"] / n["said"],
                    "words": n["words"] / n["said"], "newline_rate": n["newline"] / n["kept"]}
            for model, n in counts.items() if n["steps"] and n["said"]}
