"""Run a method over a question set, one JSON line per finished question, resumable, into
results/<profile>/runs/<dataset>/<method>-<config hash>.jsonl.

A line is written (and fsync'ed) only when its question is finished, so a crash or Ctrl-C loses at
most the question in flight; on resume, finished ids are skipped and a torn last line is cut off.
A disk that fills mid-line gets the line cut off at once (`core.io.appending`) and the run stops
with the disk-full paragraph; the same command resumes once there is room. A question that fails
for a reason of its own (`QuestionError`) is a finished line with `failed` and an empty answer.
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..core.errors import QuestionError, UserError
from ..core.paths import results_dir


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:10]


def run_path(profile: str, dataset: str, method_name: str, method_config: dict) -> Path:
    return results_dir(profile) / "runs" / dataset / f"{method_name}-{config_hash(method_config)}.jsonl"


CURRENT_NAME = "current.json"     # beside the run files of a data set: {label: the current file}


def mark_current(path: Path) -> None:
    """Record `path` as its label's current run file: its other config hashes are older (`status`)."""
    from ..core.io import read_json, write_json

    record = path.parent / CURRENT_NAME
    label = path.stem.rsplit("-", 1)[0]
    current = read_json(record) if record.is_file() else {}
    if current.get(label) != path.name:
        write_json(record, {**current, label: path.name})


def current_name(dataset_dir: Path, label: str) -> str | None:
    """The file name `mark_current` recorded for `label`, or None (none, or an unreadable record)."""
    from ..core.io import read_json

    record = dataset_dir / CURRENT_NAME
    try:
        return read_json(record).get(label) if record.is_file() else None
    except (UserError, AttributeError):
        return None


def read_results(path: str | Path, repair: bool = False) -> list[dict]:
    """Finished lines of a run file. A torn LAST line is dropped (and cut from the file if
    `repair`); a malformed line elsewhere is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        return []
    rows, good_bytes, torn = [], 0, False
    with open(path, "rb") as fh:
        lines = fh.readlines()
    for lineno, raw in enumerate(lines, 1):
        try:
            if raw.strip():
                rows.append(json.loads(raw))
            good_bytes += len(raw)
        except json.JSONDecodeError:
            if lineno == len(lines):          # torn write at the end: the question was not finished
                torn = True
                if repair:
                    with open(path, "r+b") as fh:
                        fh.truncate(good_bytes)
                break
            raise UserError("a results line is not valid JSON", path=path, line=lineno,
                            fix="delete that line (its question will be run again on resume)") from None
    if rows and not torn and not lines[-1].endswith(b"\n") and repair:
        from ..core.io import appending
        with appending(path) as write:        # a complete last object without its newline
            write("\n")
    return rows


def _counters(backend) -> dict[str, float]:
    stats = getattr(backend, "stats", None)
    stats = stats() if callable(stats) else (stats or {})
    return {k: v for k, v in dict(stats).items() if isinstance(v, (int, float))}


def _oom_counts(backend) -> tuple[int, float]:
    """(out-of-memory retries, their failed attempts' seconds) of the model backend under any cache."""
    from ..llm.base import unwrap
    inner = unwrap(backend)
    got = _counters(inner) if inner is not None else {}
    return int(got.get("oom_retries", 0)), float(got.get("oom_seconds", 0.0))


def _plain(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) else obj


def _score(pred: str, golds: list[str]) -> dict:
    from ..evaluation import exact_match, f1_score

    return {"em": exact_match(pred, golds), "f1": f1_score(pred, golds)}


def answer_row(method, record, backend=None, scorer: Callable[[str, list[str]], dict] | None = None,
               concurrency: int = 1) -> dict:
    """One finished question's row (`run_method` documents it), built here by both engines alike."""
    from ..llm.batching import worker
    from ..llm.cache import counting, row_counts
    from ..methods.base import MethodResult

    scorer = scorer or _score
    scoped = backend is not None and getattr(backend, "scoped_counts", False)
    with worker(backend), counting() as counter:
        before = _counters(backend) if backend is not None and not scoped else {}
        oom_before = _oom_counts(backend)
        t0 = time.perf_counter()
        try:
            result, failed = method.run(record), None
        except QuestionError as err:     # this question's own problem: record it, go on
            result, failed = MethodResult(answer="", raw_output=""), err.paragraph()
        seconds = time.perf_counter() - t0
        after = _counters(backend) if backend is not None and not scoped else {}
        oom_after = _oom_counts(backend)
    delta = dict(counter.values) if scoped else {k: after[k] - before.get(k, 0) for k in after}
    row = {
        "id": record.id, "question": record.question, "golds": list(record.golds),
        "type": record.type, "answer": result.answer,
        **scorer(result.answer or "", list(record.golds)),
        "n_retrievals": result.n_retrievals,
        **row_counts(delta),       # calls (cache hits among them) and tokens, all and computed
        "seconds": round(seconds, 3), "oom_retries": oom_after[0] - oom_before[0],
        "oom_seconds": round(oom_after[1] - oom_before[1], 3),
        "raw_output": result.raw_output, "extra": _plain(result.extra),
        "trace": [_plain(t) for t in result.trace],
    }
    if concurrency > 1:
        row["concurrency"] = concurrency
    if failed:
        row["failed"] = failed
    return row


def run_method(method, records: Sequence, out_path: str | Path, *, backend=None,
               scorer: Callable[[str, list[str]], dict] | None = None, progress: bool = True,
               desc: str | None = None, limit: int | None = None, concurrency: int = 1) -> list[dict]:
    """Run `method.run(record)` for every record not yet in `out_path`; return all finished rows.

    Each row: id, question, golds, answer, em, f1, n_retrievals, llm_calls (and cache hits),
    prompt and generated tokens, seconds, trace, extra. Costs are counted per question: by a
    `counting()` scope with a CachedBackend (right under concurrency too), else as the difference
    of the backend's `stats()` counters. concurrency > 1 needs a backend that batches concurrent
    calls (vLLM, or transformers under `llm.batching.ThreadBatcher`); rows are written as questions
    finish, `seconds` each question's own, overlapping wall time. With runner.engine: ray,
    `backend` is a `FleetBackend` and `method` its `RemoteMethod`: Ray workers answer
    (`concurrency` at a time each) and this process writes their rows as they arrive.
    """
    from ..core.io import appending
    from ..core.progress import tqdm

    concurrency = int(concurrency or 1)
    why_not = one_at_a_time(method, backend)
    if concurrency > 1 and why_not:
        raise UserError(f"runner.concurrency is {concurrency} but {why_not}", setting="runner.concurrency",
                        fix="set runner.concurrency: 1, or (for a backend) model.backend: vllm or a "
                            "LLaMA-family model with model.shared_prefix: true")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done_rows = read_results(out_path, repair=True)
    done = {row["id"] for row in done_rows}
    ids = [r.id for r in records]
    if len(set(ids)) != len(ids):
        raise UserError("the question set has duplicate ids", setting="dataset",
                        fix="give every question a unique id")
    todo = [r for r in records if r.id not in done]
    if limit is not None:
        todo = todo[:max(0, limit - len(done))]
    fleet = getattr(backend, "fleet", None)      # runner.engine: ray (a `engine.FleetBackend`)

    def one(record):
        return answer_row(method, record, backend, scorer, concurrency)

    bar = tqdm(total=len(records), initial=len(records) - len(todo) if limit is None else len(done),
               desc=desc or f"{method.name}", unit="q", disable=not progress, mininterval=2.0)
    try:
        with appending(out_path) as append:      # a line lands whole, or not at all (a full disk)
            def write(row):
                append(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                done_rows.append(row)
                bar.update(1)

            if fleet is not None:
                # the workers answer; this process alone writes, in the order they finish
                bar.set_postfix_str(f"{fleet.size} Ray workers", refresh=False)
                for _, row in fleet.map([(r.id, method.task(r, scorer, concurrency)) for r in todo],
                                        per_worker=concurrency, done=len(done_rows), file=out_path):
                    write(row)
            elif concurrency == 1:
                for record in todo:
                    write(one(record))
            else:
                # keep `concurrency` questions in flight; write each as it finishes; on an error
                # start nothing new, write what the others finish, then raise
                error: BaseException | None = None
                queue = list(todo)
                with ThreadPoolExecutor(max_workers=concurrency) as ex:
                    running = set()
                    while queue or running:
                        while queue and len(running) < concurrency:
                            running.add(ex.submit(contextvars.copy_context().run, one, queue.pop(0)))
                        finished, running = wait(running, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            try:
                                write(fut.result())
                            except BaseException as e:  # noqa: BLE001 - re-raised below
                                error = error or e
                        if error is not None:
                            queue.clear()
                if error is not None:
                    raise error
    finally:
        bar.close()
    return done_rows


def one_at_a_time(method, backend) -> str | None:
    """Why `method`'s questions on `backend` cannot run side by side, or None when they can."""
    from ..core.concurrency import supports_concurrency

    why = getattr(method, "one_question_at_a_time", None)
    if why:
        return f"{method.name} answers one question at a time: {why}"
    if not supports_concurrency(backend):
        return (f"the {getattr(backend, 'name', type(backend).__name__)} backend decodes one call at a "
                "time (vLLM and transformers models with shared-prefix decoding batch concurrent calls)")
    return None


def summarise(rows: Iterable[dict]) -> dict:
    """Mean EM/F1 (percent) and per-question costs of a finished run."""
    rows = list(rows)
    n = len(rows) or 1
    return {
        "questions": len(rows),
        "em": round(100 * sum(r["em"] for r in rows) / n, 2),
        "f1": round(100 * sum(r["f1"] for r in rows) / n, 2),
        "retrievals_per_q": round(sum(r["n_retrievals"] for r in rows) / n, 3),
        "llm_calls_per_q": round(sum(r["llm_calls"] for r in rows) / n, 2),
        "tokens_per_q": round(sum(r["tokens"] for r in rows) / n, 1),
        "seconds_per_q": round(sum(r["seconds"] for r in rows) / n, 3),
        "failed": sum(bool(r.get("failed")) for r in rows),
    }
