"""The rehearsal's verdicts: the one place a part's status is set.

A part's process reports what happened (`outcome`: returned, with what the part found, or raised);
the driver adds the outcomes a process cannot report itself (timeout, crashed, running when the
call ended, skipped for time). `judge` decides the status from that alone, one rule per part, so
each rule is testable with crafted results (tests/test_rehearsal_verdicts.py). Statuses:
- ok: proved its point (each part's rule below);
- failed: ran and did not prove it (`why` lists the reasons), or raised;
- not run: cannot run on that machine (the ray part where Ray does not import and the pack did
  not carry it), with why: listed, and not a failure;
- skipped: not started (or, for seakr_paper, a set not reached) because what was left of the
  call's budget was less than its estimate: listed with the estimate, and the report's
  `next_call` runs it;
- timeout, crashed, killed: never finished (killed: the whole call ended while it ran); what the
  part had measured by then is kept under `partial`.
env fails a torch or transformers that differs from its pin with no row in the record of tested
versions (tested_with.py); decode_bench fails a raised timing, its own `ok` false and a graph
path that never captured; seakr_paper fails decode calls on another path than it names.
Every part also fails when more than OUTSIDE_TORCH_LIMIT_GIB of the card was in use beyond the
torch reserved memory of the part's processes, held for two samples in a row (card_memory.py).

`merge` joins the reports of several calls of one commit: every call's entry of every part is
kept, per set where a part runs per set (seakr_paper), and a part not ok in ANY call fails the
merged report.
"""
from __future__ import annotations

from ..core.setting_choices import resolve_decode
from .plan import PARTS, next_call
from .tested_with import RECORD, untested

OUTSIDE_TORCH_LIMIT_GIB = 1.0
# gpu_check: forced-EOS vectors against a full forward pass, largest relative error allowed. 16-bit:
# the rounding of a 32-layer pass (docs/measurements.md gives what an H100 showed in float16);
# float32 agrees to the rounding of the summation order.
EOS_VECTOR_TOLERANCE = {"float32": 1e-3, "float16": 0.05, "bfloat16": 0.1}
PAPER_MIN_QUESTIONS = 1          # seakr_paper: questions finished on each set for ok
UNFINISHED = {"timeout": "timeout", "crashed": "crashed", "running": "killed"}
NOT_OK = ("failed", "timeout", "crashed", "killed")


def _env(got: dict, expect: dict) -> list[str]:
    why = []
    for mod in ("torch", "transformers"):
        if not (got.get("versions") or {}).get(mod):
            why.append(f"{mod} does not import")
    if got.get("package_modules_not_importing"):
        why.append(f"package modules do not import: {sorted(got['package_modules_not_importing'])}")
    if expect.get("device") == "cuda" and not got.get("cuda_available"):
        why.append("torch sees no CUDA GPU")
    differ = got.get("differ_from_pins") or {}
    drift = untested({m: (got.get("versions") or {}).get(m) for m in differ},
                     {m: d.get("pinned") for m, d in differ.items()})
    why += [f"{m} {d['installed']} differs from its pin {d['pinned']} and the package has not been tested with it "
            f"(tested: {', '.join(d['tested']) or 'none'}; {RECORD.relative_to(RECORD.parents[2])})"
            for m, d in drift.items()]
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


def paper_set_status(got: dict, expect: dict) -> dict[str, tuple[str, str | None]]:
    """seakr_paper, set by set: (ok | failed | skipped, why)."""
    out = {}
    for d in expect.get("paper_sets", ()):
        q = (got.get("questions") or {}).get(d) or {}
        n = len(q.get("seconds", []))
        if q.get("failed"):
            out[d] = ("failed", f"{d}: {q['failed']} question(s) failed")
        elif n >= PAPER_MIN_QUESTIONS:
            out[d] = ("ok", None)
        elif d in (got.get("not_reached") or {}):
            out[d] = ("skipped", f"{d}: {got['not_reached'][d].get('why')}")
        else:
            out[d] = ("failed", f"{d}: {n} question(s) finished, {PAPER_MIN_QUESTIONS} needed")
    return out


def decode_ran(got: dict, expect: dict) -> list[str]:
    """seakr_paper's decode calls ran on the path it names (the one asked, where the call says),
    on no other, and the graph path with a capture and replays."""
    rec = got.get("decode")
    if rec is None:
        return ["no record of the decode path that ran (decode)"]
    named, calls = rec.get("named"), rec.get("calls") or {}
    asked = expect.get("paper_decode")
    why = []
    if asked and named != resolve_decode(asked):
        why.append(f"asked for decode path {asked!r}, the profile ran with {named!r}")
    if not calls.get(named):
        why.append(f"no decode call ran on the path named, {named!r} (calls per path: {calls})")
    others = {p: n for p, n in calls.items() if p != named}
    if others:
        why.append(f"decode calls ran on other paths than {named!r}: {others}")
    if named == "graph" and not (rec.get("graph_captures") and rec.get("graph_replays")):
        why.append(f"the graph path captured {rec.get('graph_captures')} graph(s) and replayed "
                   f"{rec.get('graph_replays')} step(s): it did not run as a graph")
    return why


def _seakr_paper(got: dict, expect: dict) -> list[str]:
    why = [w for s, w in paper_set_status(got, expect).values() if s == "failed"]
    ran = any((q or {}).get("seconds") for q in (got.get("questions") or {}).values())
    return why + (decode_ran(got, expect) if ran else [])


def _oom(got: dict, expect: dict) -> list[str]:
    if got.get("retry_path_ran"):
        return []
    if got.get("why"):
        return [got["why"]]
    runs = got.get("runs") or []
    if not any(r.get("oom_retries") for r in runs):
        return ["the out-of-memory retry never ran (no capped run retried)"]
    done = [r for r in runs if r.get("ok")]
    if not done:
        return ["every capped run failed, even after its retries"]
    if not any(r.get("same_tokens") for r in done):
        return ["the retried run's tokens differ from the uncapped run's"]
    return [f"no retried run finished under its cap below the uncapped peak ({got.get('uncapped_peak_bytes')} B): "
            + "; ".join(f"peak {r.get('peak_bytes')} B, cap {r.get('cap_bytes')} B" for r in done)]


def ray_without_ray(got: dict) -> tuple[str, list[str]]:
    """Ray did not import in the part's process: `not run` where it could not travel (no pack, or
    the pack's sizes.json left it out), `failed` where the pack carried it (the packing broke)."""
    err, sizes = got.get("import_error"), got.get("pack_sizes")
    if sizes is None:
        return "not run", [f"ray does not import here ({err}) and no pack sizes at {got.get('pack')}/sizes.json: "
                           "no pack was carried (scripts/gpu_rehearsal_pack.sh makes one with Ray)"]
    if not sizes.get("ray_carried"):
        return "not run", [f"ray does not import here ({err}); {sizes.get('why')}"]
    return "failed", [f"the pack carried Ray ({sizes.get('why')}) but it does not import: {err}"]


def _ray(got: dict, expect: dict) -> list[str]:
    why = []
    if not got.get("same_rows_as_local"):
        why.append("the Ray worker's run rows differ from the local engine's: "
                   f"{got.get('differing_fields') or 'other questions'}")
    if not got.get("same_scores_as_local"):
        why.append("the Ray worker's scores differ from the local engine's")
    if not got.get("llm_calls") or got.get("llm_cache_hits"):
        why.append(f"the Ray run did not compute its calls (llm_calls {got.get('llm_calls')}, "
                   f"cache hits {got.get('llm_cache_hits')})")
    if expect.get("device") == "cuda" and len((got.get("worker") or {}).get("gpus") or []) != 1:
        why.append(f"the worker was to hold one GPU, it saw {(got.get('worker') or {}).get('gpus')}")
    return why


def graph_timed(paths: dict) -> list[str]:
    """The graph path's timed calls each captured (once per part) and replayed."""
    row = paths.get("graph")
    if row is None:
        return ["the graph path was not timed"]
    if "error" in row:
        return []                   # said with the paths whose timed run raised
    caps, reps = row.get("captures_per_call") or [], row.get("replays_per_call") or []
    if not caps or not all(caps) or not all(reps):
        return [f"the graph path did not run as a graph: captures per timed call {caps}, replays {reps}"]
    return []


def _decode_bench(got: dict, expect: dict) -> list[str]:
    why = []
    checks, paths = got.get("checks") or {}, got.get("paths") or {}
    if not checks:
        why.append("no decode path was checked against the reference path")
    bad = sorted(p for p, c in checks.items() if not c.get("ok"))
    if bad:
        why.append(f"decode paths whose outputs differ from the reference path, or whose check raised: {bad}")
    raised = {p: r["error"] for p, r in paths.items() if "error" in r}
    if raised:
        why.append(f"decode paths whose timed run raised: {raised}")
    if got.get("ok") is not True:
        why.append(f"the benchmark's own verdict is ok = {got.get('ok')!r}")
    if "graph" in paths or expect.get("device") == "cuda":
        why += graph_timed(paths)
    return why


RULES = {"env": _env, "gpu_tests": _gpu_tests, "gpu_check": _gpu_check, "methods": _methods,
         "seakr_paper": _seakr_paper, "oom": _oom, "ray": _ray, "decode_bench": _decode_bench}


def _outside_torch(got: dict) -> list[str]:
    card = (got.get("card") or {}).get("outside_torch_gib") or {}
    worst = card.get("worst")
    if worst is not None and worst > OUTSIDE_TORCH_LIMIT_GIB:
        return [f"{worst} GiB of the card in use outside torch's reserved memory (at {card.get('worst_at')}; "
                f"at most {OUTSIDE_TORCH_LIMIT_GIB}): another process or library holds the GPU"]
    return []


def judge(part: str, got: dict, expect: dict) -> dict:
    """`got` with its status decided (and `why` where it is not ok). `expect`: what the call asked
    for (device, methods, paper_sets, gpu_check_rows)."""
    out = dict(got)
    outcome = got.get("outcome")
    why: list[str]
    if outcome == "skipped":
        status, why = "skipped", [(got.get("skipped") or {}).get("why", "not started: the budget was spent")]
        if part == "seakr_paper":
            out["set_status"] = {d: "skipped" for d in expect.get("paper_sets", ())}
    elif outcome in UNFINISHED:
        status, why = UNFINISHED[outcome], [got.get("error") or outcome]
    elif outcome == "raised":
        status, why = "failed", [got.get("error", "it raised")] + _outside_torch(got)
    elif outcome != "returned":
        status, why = "failed", [f"no outcome reported ({outcome!r})"]
    elif part == "ray" and got.get("ray_imports") is False:
        status, why = ray_without_ray(got)
    else:
        why = RULES[part](got, expect) + _outside_torch(got)
        status = "failed" if why else "ok"
        if part == "seakr_paper":
            sets = paper_set_status(got, expect)
            out["set_status"] = {d: s for d, (s, _) in sets.items()}
            if status == "ok" and any(s == "skipped" for s, _ in sets.values()):
                status, why = "skipped", [w for s, w in sets.values() if s == "skipped"]
    out["status"] = status
    if why and status != "ok":
        out["why"] = why
    return out


def summary(report: dict) -> dict:
    """{ok, not_ok: {part: why}, not_run: {part: why}, skipped: {part: why}, exit_status} of a
    report's parts. Exit status: 1 when a part is not ok, else 2 when a part was skipped for time
    (the report's next_call runs it), else 0."""
    parts = report.get("parts", {})
    pick = lambda status: {p: v.get("why") for p, v in parts.items() if v.get("status") == status}  # noqa: E731
    ok = [p for p, v in parts.items() if v.get("status") == "ok"]
    not_ok = {p: v.get("why") or [v.get("error") or v.get("status")] for p, v in parts.items()
              if v.get("status") not in ("ok", "not run", "skipped")}
    skipped = pick("skipped")
    return {"ok": ok, "not_ok": not_ok, "not_run": pick("not run"), "skipped": skipped,
            "exit_status": 1 if not_ok else 2 if skipped else 0}


def _merged_part(entries: list[tuple[int, dict]]) -> dict:
    """One part over several calls: every call's entry kept; not ok in any call is failed, else
    ok in a call (per set: every set ok in some call) is ok, else skipped or not run."""
    out: dict = {"calls": {str(i): e for i, e in entries}}
    bad = [(i, e) for i, e in entries if e.get("status") in NOT_OK]
    why = [f"call {i}: {w}" for i, e in bad for w in (e.get("why") or [e.get("status")])]
    statuses = {e.get("status") for _, e in entries}
    per_set = [(i, e["set_status"]) for i, e in entries if e.get("set_status")]
    if per_set:
        sets: dict[str, dict] = {}
        for i, st in per_set:
            for d, s in st.items():
                sets.setdefault(d, {})[str(i)] = s
        merged = {d: "failed" if any(s in NOT_OK for s in by.values()) else "ok" if "ok" in by.values()
                  else "skipped" for d, by in sets.items()}
        out["set_status"], out["set_calls"] = merged, sets
        if not bad and "skipped" in merged.values():
            never = [f"{d}: never reached" for d, s in merged.items() if s == "skipped"]
            return {**out, "status": "skipped", "why": never}
        return {**out, "status": "failed" if bad else "ok", **({"why": why} if bad else {})}
    if bad:
        return {**out, "status": "failed", "why": why}
    for status in ("ok", "skipped", "not run"):
        if status in statuses:
            last = next(e for _, e in reversed(entries) if e.get("status") == status)
            return {**out, "status": status, **({"why": last["why"]} if last.get("why") else {}),
                    **({"skipped": last["skipped"]} if last.get("skipped") else {})}
    return {**out, "status": "failed", "why": [f"unknown statuses {sorted(map(str, statuses))}"]}


def merge(reports: list[dict]) -> dict:
    """One report of several calls of one commit under one cap on one device and shape: each
    call listed (`calls`), every part with every call's entry, its status decided across them,
    the summary and the next call decided again. Reports that name no commit, or different
    commits, caps, devices or shapes, are refused: the merged report must describe one code on
    one card budget."""
    nameless = [i for i, r in enumerate(reports) if not r.get("commit")]
    if nameless:
        raise ValueError(f"report(s) {nameless} name no commit (no .git and no pack commit.json travelled): "
                         "cannot tell they ran the same code")
    for key in ("commit", "memory_cap_gib", "device", "shape"):
        values = {str(r.get(key)) for r in reports}
        if len(values) > 1:
            raise ValueError(f"the reports differ in {key}: {sorted(values)}: merge only the calls of one "
                             "commit under one cap, on one device and shape")
    out = {k: v for k, v in reports[0].items() if k not in ("parts", "summary", "seconds", "argv", "started",
                                                            "budget_s", "plan", "work", "next_call")}
    out["calls"] = [{k: r.get(k) for k in ("started", "argv", "seconds", "budget_s", "work", "summary")}
                    for r in reports]
    names = [p for p in PARTS if any(p in r.get("parts", {}) for r in reports)]
    out["parts"] = {p: _merged_part([(i, r["parts"][p]) for i, r in enumerate(reports) if p in r.get("parts", {})])
                    for p in names}
    out["summary"] = summary(out)
    out["next_call"] = next_call(out)
    return out
