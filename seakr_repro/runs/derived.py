"""Rows whose answers follow exactly from another run's stored rows, written from them instead of
run again (`derive`, before `run_method` runs the rest): a run whose configuration is another's on
the same set (the same calls, so the same answers: Table 3's `fixed`/`calibrated-delta` or
`faithful` row, Table 4's row of the profile's own model), and SeaKR's rationales-only and
knowledge-only rows (SeaKR makes both final calls and keeps each path's answer and output). A
derived row is what running it would write but for the work: all calls served, seconds 0,
`derived_from` naming the source. tests/test_derived_rows.py runs both ways and compares.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

REASONING_PATHS = {"rationales": ("rationale_answer", "final_rationales"),
                   "knowledge": ("knowledge_answer", "final_knowledge")}


def _path_chosen(kind: str) -> Callable[[dict], dict | None]:
    """A self-aware SeaKR row turned into the row of `reasoning: kind` (None: the row lacks it)."""
    answer_field, trace_kind = REASONING_PATHS[kind]

    def turn(row: dict) -> dict | None:
        extra = row.get("extra") or {}
        final = next((t for t in row.get("trace") or [] if t.get("kind") == trace_kind), None)
        if answer_field not in extra or (final is None and not row.get("failed")):
            return None
        return {**row, "answer": extra[answer_field] or "", "extra": {**extra, "choice": kind},
                "raw_output": final["output"] if final is not None else row.get("raw_output", "")}
    return turn


def source(method, path: Path) -> tuple[Path, Callable[[dict], dict | None], str] | None:
    """(the run file a row's answers follow from, how a source row becomes this run's, how) for
    the run of `method` whose file is `path`; None when none is on disk."""
    from .runner import config_hash

    folder, label = path.parent, path.stem.rsplit("-", 1)[0]
    config = dict(method.config)
    same = [p for p in folder.glob(f"*-{config_hash(config)}.jsonl") if p != path]
    if same:
        return sorted(same)[0], dict, "the same configuration"
    kind = config.get("reasoning")
    if config.get("method") == "seakr" and kind in REASONING_PATHS:
        whole = config_hash({**config, "reasoning": "self_aware"})
        found = sorted(p for p in folder.glob(f"*-{whole}.jsonl") if p.stem.rsplit("-", 1)[0] != label)
        if found:
            return found[0], _path_chosen(kind), f"the {kind} path of the self-aware run"
    return None


def derive(method, path: Path, records: Sequence) -> int:
    """Append to `path` the rows of `records` it lacks that follow from `source`; the number written."""
    from ..core.io import appending
    from .runner import _score, read_results

    found = source(method, Path(path))
    if found is None:
        return 0
    src, turn, how = found
    have = {r["id"] for r in read_results(path, repair=True)}
    by_id = {r["id"]: r for r in read_results(src)}
    rows = []
    for record in records:
        row = by_id.get(record.id)
        got = turn(row) if row is not None and record.id not in have else None
        if got is None:
            continue
        got.update(_score(got["answer"] or "", list(record.golds)), llm_cache_hits=got.get("llm_calls", 0),
                   computed_prompt_tokens=0, computed_tokens=0, seconds=0.0, oom_retries=0, oom_seconds=0.0,
                   derived_from={"file": src.name, "how": how})
        rows.append(got)
    if rows:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with appending(Path(path)) as append:
            for row in rows:
                append(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    return len(rows)
