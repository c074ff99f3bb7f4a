"""The GPU rehearsal's verdicts: a part is ok only when it proved what it set out to prove.

A part's child (`gpu_rehearsal._child`) reports what happened; `judge` decides its status from
that alone, so the rules are one function each and testable with crafted results
(tests/test_gpu_rehearsal.py). Statuses:
- ok: proved its point (each part's rule below);
- failed: ran and did not prove it (the reasons are listed under `why`);
- not run: cannot run on that machine (the ray part where Ray does not import), with why: the
  summary lists it, and it does not make the call fail;
- timeout / crashed / out of time: never finished, or never started because the call's budget was
  spent: not ok.
Every part also fails when more than OUTSIDE_TORCH_LIMIT_GIB of the card was in use beyond
torch's own reserved memory (another process, or a library such as JAX taking the GPU behind
torch's back, issue 38).
"""
from __future__ import annotations

OUTSIDE_TORCH_LIMIT_GIB = 1.0
# gpu_check: forced-EOS vectors against a full forward pass, largest relative error allowed. 16-bit:
# rounding of a 32-layer pass (issue 38 measured 0.0287 in float16 on an H100); float32 agrees to
# rounding of the summation order.
EOS_VECTOR_TOLERANCE = {"float32": 1e-3, "float16": 0.05, "bfloat16": 0.1}
UNFINISHED = ("timeout", "crashed", "out of time")
NOT_OK = ("failed", *UNFINISHED)


def _env(got: dict, expect: dict) -> list[str]:
    why = []
    for mod in ("torch", "transformers"):
        if not (got.get("versions") or {}).get(mod):
            why.append(f"{mod} does not import")
    if got.get("package_modules_not_importing"):
        why.append(f"package modules do not import: {sorted(got['package_modules_not_importing'])}")
    if expect.get("device") == "cuda" and not got.get("cuda_available"):
        why.append("torch sees no CUDA GPU")
    return why


def _gpu_tests(got: dict, expect: dict) -> list[str]:
    why = []
    if got.get("rc") != 0:
        why.append(f"pytest exited {got.get('rc')}")
    if "tests" not in got:
        return why + ["no JUnit report: nothing was collected"]
    if got.get("errors"):          # collection errors are JUnit errors too: a module that did not import
        why.append(f"{got['errors']} error(s) (a collection error included)")
    if got.get("failures"):
        why.append(f"{got['failures']} test(s) failed")
    if not got["tests"]:
        why.append("no GPU test was collected")
    elif expect.get("device") == "cuda" and not got.get("passed"):
        why.append("no GPU test passed on the GPU (all skipped?)")
    return why


def _gpu_check(got: dict, expect: dict) -> list[str]:
    why = []
    asked = [int(r) for r in str(expect.get("gpu_check_rows", "20,10,5")).split(",")]
    done = [r.get("max_batch_rows") for r in got.get("runs", [])]
    if done != asked:
        why.append(f"ran max_batch_rows {done}, asked {asked}")
    err, bound = got.get("eos_vector_max_rel_err"), EOS_VECTOR_TOLERANCE.get(got.get("dtype"), 0.05)
    if err is None or err > bound:
        why.append(f"forced-EOS vectors differ from a full forward pass by {err} (relative; at most {bound})")
    return why


def _methods(got: dict, expect: dict) -> list[str]:
    why = []
    entries = got.get("methods") or {}
    missing = sorted(set(expect.get("methods", ())) - set(entries))
    if missing:
        why.append(f"never ran: {missing}")
    for name, entry in entries.items():
        if "error" in entry:
            why.append(f"{name}: {entry['error'][:200]}")
            continue
        if entry.get("skipped"):
            why.append(f"{name}: skipped: {entry['skipped']}")
        sets = entry.get("sets") or {}
        if not sets:
            why.append(f"{name}: no set ran")
        elif set(entry.get("asked_sets", ())) - set(sets):
            why.append(f"{name}: never ran on {sorted(set(entry['asked_sets']) - set(sets))}")
        for d, row in sets.items():
            if row.get("n", 0) < 1:
                why.append(f"{name} on {d}: no question")
            if row.get("failed"):
                why.append(f"{name} on {d}: {row['failed']} question(s) failed")
    return why


def _seakr_paper(got: dict, expect: dict) -> list[str]:
    why = []
    need = int(expect.get("paper_questions", 3))
    for d in expect.get("paper_sets", ()):
        q = (got.get("questions") or {}).get(d) or {}
        n = len(q.get("seconds", []))
        if n < need:
            why.append(f"{d}: {n} question(s) finished, {need} needed")
        if q.get("failed"):
            why.append(f"{d}: {q['failed']} question(s) failed")
    return why


def _oom(got: dict, expect: dict) -> list[str]:
    if got.get("retry_path_ran"):
        return []
    tried = got.get("attempts") or []
    if not any(t.get("oom_retries") for t in tried):
        return ["the out-of-memory retry never ran (no attempt retried)"]
    if not any(t.get("ok") for t in tried):
        return ["every attempt failed, even after its retries"]
    return ["the retried run's tokens differ from the uncapped run's"]


def _ray(got: dict, expect: dict) -> list[str]:
    why = [] if got.get("same_rows_as_local") else ["the Ray worker's run rows differ from the local engine's"]
    return why + ([] if got.get("same_scores_as_local") else ["the Ray worker's scores differ from the local engine's"])


def _decode_bench(got: dict, expect: dict) -> list[str]:
    bad = sorted(p for p, c in (got.get("checks") or {}).items() if not c.get("ok"))
    if not got.get("checks"):
        return ["no decode path was checked against the reference path"]
    return [f"decode paths whose outputs differ from the reference path: {bad}"] if bad else []


RULES = {"env": _env, "gpu_tests": _gpu_tests, "gpu_check": _gpu_check, "methods": _methods,
         "seakr_paper": _seakr_paper, "oom": _oom, "ray": _ray, "decode_bench": _decode_bench}


def _outside_torch(got: dict) -> list[str]:
    worst = ((got.get("card") or {}).get("outside_torch_gib") or {}).get("worst")
    if worst is not None and worst > OUTSIDE_TORCH_LIMIT_GIB:
        at = got["card"]["outside_torch_gib"].get("worst_at")
        return [f"{worst} GiB of the card in use outside torch's reserved memory (at {at}; at most "
                f"{OUTSIDE_TORCH_LIMIT_GIB}): another process or library holds the GPU"]
    return []


def judge(part: str, got: dict, expect: dict) -> dict:
    """`got` with its status decided: ok, failed (with `why`), not run (with `why`) or unfinished.
    `expect`: what the call asked for (device, methods, paper_sets, paper_questions, gpu_check_rows)."""
    out = dict(got)
    status = got.get("status")
    if status in UNFINISHED or status == "not run":
        return out
    if status == "failed":           # the part raised: its error says why
        out["why"] = [got.get("error", "it raised")] + _outside_torch(got)
        return out
    why = RULES[part](got, expect) + _outside_torch(got)
    out["status"] = "failed" if why else "ok"
    if why:
        out["why"] = why
    return out


def summary(report: dict) -> dict:
    """{ok: [...], not_ok: {part: why}, not_run: {part: why}, exit_status} of a report's parts."""
    parts = report.get("parts", {})
    ok = [p for p, v in parts.items() if v.get("status") == "ok"]
    not_run = {p: v.get("why") for p, v in parts.items() if v.get("status") == "not run"}
    not_ok = {p: v.get("why") or [v.get("error") or v.get("status")] for p, v in parts.items()
              if v.get("status") not in ("ok", "not run")}
    return {"ok": ok, "not_ok": not_ok, "not_run": not_run, "exit_status": 1 if not_ok else 0}


def merge(reports: list[dict]) -> dict:
    """One report of several calls (the planned calls each write their own): every part as its
    latest call reported it, with that call's start, commit and cap (`call`); the calls listed;
    the summary decided again. Reports of different commits or caps are refused: the merged report
    must describe one commit on one card budget."""
    commits = {r.get("commit") for r in reports if r.get("commit")}
    caps = {r.get("memory_cap_gib") for r in reports}
    if len(commits) > 1 or len(caps) > 1:
        raise ValueError(f"the reports differ in commit {sorted(commits)} or memory cap {sorted(caps, key=str)}: "
                         "merge only the calls of one commit under one cap")
    out = {k: v for k, v in reports[-1].items() if k not in ("parts", "summary", "seconds", "argv", "started",
                                                              "part_limits_s", "budget_s")}
    out["calls"] = [{k: r.get(k) for k in ("started", "argv", "seconds", "budget_s", "part_limits_s")}
                    for r in reports]
    out["parts"] = {}
    for i, r in enumerate(reports):
        for part, got in r.get("parts", {}).items():
            out["parts"][part] = {**got, "call": i}
    out["summary"] = summary(out)
    return out
