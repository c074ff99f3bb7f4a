"""The GPU rehearsal's driver: everything a lent GPU can prove about this package, in one call.

`bash scripts/gpu_rehearsal.sh OUT` (`make gpu-rehearsal`) runs `python -m seakr_repro.rehearsal
--out OUT`: the parts of the plan's first call (plan.calls) in order, each in a process of its own
(child.py) under a time limit, so a part that crashes, runs out of memory or of time is recorded
and the next one runs. The report, OUT/report.json, is rewritten (atomically) the moment a part
ends, and while a part runs whenever it leaves a partial result, so a call killed from outside
keeps every part before, and what the running part had measured. The script tees the log to
OUT/log.txt; nothing else is written under OUT (assumptions.FILES_BACK files come back), the
work goes to a FRESH folder per call (`--work`'s parent, /tmp by default), so a second call on a
warm machine resumes nothing of the first.

Time: the call has `--budget` seconds (by default its parts' estimates and plan.SLACK_FRACTION
of slack, the plan's arithmetic is in plan.py); that slack is left to parts that run over. A
part whose estimate (plan.estimates) does not fit in what is left before the slack is skipped
and says so with its estimate; one that starts runs under min(its limit, what is left).
seakr_paper, last, runs questions while they fit before the slack. What the call could not
reach, and the plan's second call after its first, is the report's `next_call`: the exact
REHEARSAL_ARGS of a second call, its budget and timeout_s.

Verdicts (verdicts.py, the one place a status is set): ok, failed, not run (cannot run on that
machine, with why), skipped (for time, with the estimate), timeout, crashed, killed. The report's
`summary` lists them; the command exits 1 when a part is not ok, 2 when none failed but one was
skipped (run `next_call`), 0 otherwise. Every part also reports the card's memory outside torch
(card_memory.py) and fails above verdicts.OUTSIDE_TORCH_LIMIT_GIB. Every part runs under a
24 GiB cap (`--memory-cap-gib N|none`: the paper profile's card) in each of its processes.

The report names the commit it ran: git's where `.git` travelled, else the pack's commit.json
(pack.py) with the files that differ from it. `--merge A/report.json B/report.json --out OUT`
writes one report of several calls of one commit (verdicts.merge) and exits as a call would.

`--device cpu` (the tiny shape) runs every part in minutes here (tests/test_gpu_rehearsal.py,
in `make test`), so the rehearsal cannot rot while no GPU is at hand.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.io import write_json
from ..core.paths import REPO_ROOT
from ..core.setting_choices import DECODE_SETTINGS
from . import assumptions as lent
from .card_memory import MEMORY_CAP_GIB
from .child import partial_path, read_partial, result_path
from .plan import (ONE_CALL, PAPER_SETS, PARTS, SLACK_FRACTION, calls, estimate, make_call, next_call, part_limit,
                   skip_record)
from .verdicts import judge, merge, summary

POLL_S = 2.0                 # how often the driver looks for a running part's partial result


def _cap(text: str) -> float | None:
    if text.lower() == "none":
        return None
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("a cap in GiB above 0, or none")
    return value


def _part_seconds(text: str) -> dict[str, float]:
    """'methods=300,oom=60' -> {part: seconds} (the parts' own limits)."""
    out = {}
    for item in filter(None, text.split(",")):
        part, _, sec = item.partition("=")
        if part not in PARTS or not sec:
            raise argparse.ArgumentTypeError(f"'{item}': give PART=SECONDS with a part of {', '.join(PARTS)}")
        out[part] = float(sec)
    return out


def _names(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m seakr_repro.rehearsal", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="report.json goes here")
    p.add_argument("--work", type=Path, default=None,
                   help="the folder in which this call makes its own fresh work folder (default /tmp)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shape", default=None, choices=("llama-2-7b", "tiny"),
                   help="default: llama-2-7b on cuda, tiny on cpu")
    p.add_argument("--parts", type=_names, default=None,
                   help=f"the parts, in this order (default: the plan's first call for the shape, of "
                        f"{','.join(ONE_CALL)}: plan.calls; also: {','.join(sorted(set(PARTS) - set(ONE_CALL)))})")
    p.add_argument("--budget", type=float, default=None,
                   help=f"seconds for all parts together (default: their estimates and {SLACK_FRACTION:.0%}% of "
                        "slack: plan.make_call)")
    p.add_argument("--part-seconds", type=_part_seconds, default={},
                   help="a part's own limit, e.g. methods=300 (default: twice its estimate and a minute)")
    p.add_argument("--memory-cap-gib", type=_cap, default=MEMORY_CAP_GIB,
                   help=f"every part's GPU memory cap in GiB, or none (default {MEMORY_CAP_GIB:.0f}: the "
                        "paper profile's card)")
    p.add_argument("--questions", type=int, default=1, help="methods: questions per set")
    p.add_argument("--sets", type=int, default=1, help="methods: the first N sets of each table (0: all)")
    p.add_argument("--methods", default=None, help="methods: these (comma-separated; default every method of "
                                                   "--methods-tables)")
    p.add_argument("--methods-tables", type=_names, default=["table1"], help="methods: table1 and/or table2")
    p.add_argument("--methods-profile", default="paper-tiny", choices=("paper-tiny", "paper"),
                   help="methods: the paper profile at test sizes (default) or at its own sizes")
    p.add_argument("--paper-questions", type=int, default=3, help="seakr_paper: the most questions per set")
    p.add_argument("--paper-sets", type=_names, default=list(PAPER_SETS),
                   help="seakr_paper: the sets (of 2wiki, hotpotqa)")
    p.add_argument("--paper-decode", default="graph", choices=DECODE_SETTINGS,
                   help="seakr_paper: the decode path (model.decode; default graph, simulated as the static "
                        "step where no CUDA exists: doubles/simulated_graph.py)")
    p.add_argument("--soft-seconds", type=float, default=None,
                   help="seakr_paper: no new question after this (default: while one fits in the part's limit)")
    p.add_argument("--passages", type=int, default=2000, help="synthetic corpus size")
    p.add_argument("--gpu-tests", nargs="+", default=["tests"],
                   help="gpu_tests: folders (their modules that mark tests gpu) or files")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="REPORT",
                   help="write one report of these calls' report.json files to --out (runs nothing)")
    p.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    p.add_argument("--options", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--limit", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--started", type=float, default=None, help=argparse.SUPPRESS)
    return p


# ------------------------------------------------------------------ the call's folder and commit
def call_folder(parent: Path | None) -> Path:
    """A new, empty folder for one call's work (results, caches, the parts' files): a warm
    machine keeps /tmp between calls, and a call must compute, not resume, what it reports."""
    parent = Path(parent or tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="seakr-rehearsal-", dir=parent)).resolve()


def pack_folder() -> Path:
    return Path(os.environ.get("REHEARSAL_PACK") or REPO_ROOT / ".gpu-rehearsal")


def call_commit(pack: Path | None = None, root: Path = REPO_ROOT) -> dict:
    """{commit, commit_from, changed_from_commit}: git's HEAD where `.git` is here, else the
    commit the pack was made at (pack.tree_commit: with the files that differ from it)."""
    from ..core.provenance import git_revision
    from .pack import tree_commit

    git = git_revision()
    if git["revision"] != "unknown":
        return {"commit": git["revision"], "commit_from": "git", "changed_from_commit": git["changed"]}
    doc = tree_commit(pack if pack is not None else pack_folder(), root)
    if doc is not None:
        return {"commit": doc["commit"], "commit_from": "pack commit.json", "changed_from_commit": doc["changed"],
                "changed_files": doc["changed_count"]}
    return {"commit": None, "commit_from": None, "changed_from_commit": [],
            "commit_why": "no .git here and no commit.json in the pack "
                          "(python -m seakr_repro.rehearsal.pack commit PACK)"}


# ------------------------------------------------------------------ the parts' processes
def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """Stop a part's process, its children (pytest, Ray's processes) and its process group."""
    for pid in [proc.pid, *_descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def spawn(opt_file: Path, work: Path, part: str, limit: float, on_partial) -> dict:
    """Run `part` in a process of its own for at most `limit` seconds; its result, or what the
    driver knows of it (timeout, crashed; with the part's partial result where it left one).
    `on_partial(doc)` is called with each new partial result while the part runs."""
    t0 = time.monotonic()
    # the part's clock starts now, with its process (the monotonic clock is the machine's, not the process's)
    args = [sys.executable, "-m", "seakr_repro.rehearsal", "--child", part, "--options", str(opt_file),
            "--limit", str(limit), "--started", repr(t0), "--out", str(work)]
    env = {**os.environ, "SEAKR_RAW_DIR": str(work / "raw"), "SEAKR_CACHE_DIR": str(work / "cache"),
           "SEAKR_RESULTS_DIR": str(work / "results"), "SEAKR_OVERRIDES": "",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    # a process group of its own (to stop it with its children), in the call's session: whatever
    # ends the call (the device tool's timeout_s) ends the part too
    proc = subprocess.Popen(args, env=env, cwd=REPO_ROOT, process_group=0)
    seen = None
    rc: int | str
    try:
        while True:
            try:
                rc = proc.wait(timeout=max(0.05, min(POLL_S, t0 + limit - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= t0 + limit:
                    kill_tree(proc)
                    rc = "timeout"
                    break
            path = partial_path(work, part)
            stamp = path.stat().st_mtime_ns if path.is_file() else None
            if stamp != seen:
                seen = stamp
                doc = read_partial(work, part)
                if doc is not None:
                    on_partial(doc)
    except BaseException:               # the call is being stopped (SIGTERM, Ctrl-C): the part goes with it
        kill_tree(proc)
        raise
    try:                                # whatever of the part's process group outlived it
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    result = result_path(work, part)
    if result.is_file():
        return json.loads(result.read_text())
    partial = read_partial(work, part)
    return {"outcome": "timeout" if rc == "timeout" else "crashed", "rc": rc, "limit_s": round(limit),
            "seconds": round(time.monotonic() - t0, 1),
            "error": (f"stopped at its limit of {limit:.0f} s" if rc == "timeout"
                      else f"its process ended with {rc} and no result") + ": see log.txt",
            **({"partial": partial} if partial is not None else {})}


# ------------------------------------------------------------------ the report
def expectations(opt: dict) -> dict:
    """What the verdicts hold each part to (verdicts.judge)."""
    from .parts.methods import rehearsal_methods

    return {"device": opt["device"], "methods": rehearsal_methods(argparse.Namespace(**opt)),
            "paper_sets": opt["paper_sets"], "paper_decode": opt.get("paper_decode"), "gpu_check_rows": "20,10,5"}


def save(out: Path, report: dict) -> None:
    report["summary"] = summary(report)
    report["next_call"] = next_call(report)
    write_json(out / "report.json", json.loads(json.dumps(report, default=str)), indent=1)


def out_folder_problems(out: Path) -> list[str]:
    """What of the call's output folder would not come back from the lent machine."""
    files = [f for f in out.rglob("*") if f.is_file()]
    mib = lambda n: n / 2**20                                               # noqa: E731
    problems = [f"{f.relative_to(out)}: {mib(f.stat().st_size):.1f} MiB, over {lent.FILE_BACK_MIB} MiB"
                for f in files if mib(f.stat().st_size) > lent.FILE_BACK_MIB]
    problems += [f"{f.relative_to(out)}: more than {lent.FOLDERS_DOWN} folders down" for f in files
                 if len(f.relative_to(out).parts) > lent.FOLDERS_DOWN + 1]
    if len(files) > lent.FILES_BACK:
        problems.append(f"{len(files)} files, at most {lent.FILES_BACK} come back")
    if mib(sum(f.stat().st_size for f in files)) > lent.BACK_MIB:
        problems.append(f"over {lent.BACK_MIB} MiB in all")
    return problems


def _check_out_folder(out: Path) -> None:
    for problem in out_folder_problems(out):
        print(f"[rehearsal] WARNING: {out}: {problem} (assumptions.py: what comes back from a call)", flush=True)


def _say_summary(out: Path, report: dict) -> int:
    done = report["summary"]
    listed = lambda d: "; ".join(f"{k} ({(w or ['?'])[0]})" for k, w in d.items()) or "none"   # noqa: E731
    print(f"[rehearsal] report: {out / 'report.json'}; ok: {', '.join(done['ok']) or 'none'}; "
          f"NOT OK: {', '.join(done['not_ok']) or 'none'}; not run: {listed(done['not_run'])}; "
          f"skipped: {listed(done['skipped'])}", flush=True)
    if report.get("next_call"):
        print(f"[rehearsal] next call (timeout_s {report['next_call']['timeout_s']}): "
              f"{report['next_call']['command']}", flush=True)
    return done["exit_status"]


def _merge(p: argparse.ArgumentParser, a) -> int:
    try:
        report = merge([json.loads(f.read_text()) for f in a.merge])
    except ValueError as e:
        p.error(str(e))
    write_json(a.out / "report.json", report, indent=1)
    return _say_summary(a.out, report)


def main(argv=None) -> int:
    from .child import child_main

    p = build_parser()
    a = p.parse_args(argv)
    if a.child:
        return child_main(a.child, a.options, a.limit, a.started)
    # stopped from outside: end the running part's processes, keep the report written so far
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    a.out.mkdir(parents=True, exist_ok=True)
    if a.merge:
        return _merge(p, a)
    shape = a.shape or ("llama-2-7b" if a.device == "cuda" else "tiny")
    if a.parts is None:
        a.parts = list(calls(shape)[0].parts)
    unknown = sorted(set(a.parts) - set(PARTS))
    if unknown:
        p.error(f"--parts: unknown {unknown}; choose from {', '.join(PARTS)}")
    if set(a.paper_sets) - set(PAPER_SETS):
        p.error(f"--paper-sets: {sorted(set(a.paper_sets) - set(PAPER_SETS))} were not timed by the paper "
                f"(Table 7: {', '.join(PAPER_SETS)})")
    if a.budget is None:
        a.budget = make_call(a.parts, shape, a.paper_sets).budget
    reserve = SLACK_FRACTION * a.budget       # left to parts that run over: no part or question starts in it
    work = call_folder(a.work)
    opt = {"device": a.device, "shape": shape, "memory_cap_gib": a.memory_cap_gib, "work": str(work),
           "questions": a.questions, "sets": a.sets or None, "methods": a.methods,
           "methods_tables": a.methods_tables, "methods_profile": a.methods_profile,
           "paper_questions": a.paper_questions, "paper_sets": a.paper_sets, "paper_decode": a.paper_decode,
           "soft_seconds": a.soft_seconds, "reserve_s": reserve,
           "passages": a.passages, "gpu_tests": a.gpu_tests}
    opt_file = work / "options.json"
    write_json(opt_file, opt, indent=1)
    limits = {part: a.part_seconds.get(part, part_limit(part, shape)) for part in a.parts}
    report = {"what": "GPU rehearsal (python -m seakr_repro.rehearsal)", "device": a.device, "shape": shape,
              **call_commit(), "memory_cap_gib": a.memory_cap_gib, "paper_sets": a.paper_sets,
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "budget_s": a.budget, "work": str(work),
              "plan": {"parts": a.parts, "estimates_s": {k: estimate(k, shape).split() for k in a.parts},
                       "reserve_s": round(reserve),
                       "limits_s": {k: v for k, v in limits.items() if v != float("inf")}},
              "argv": sys.argv[1:] if argv is None else list(argv), "parts": {}}
    expect = expectations(opt)
    t_start = time.monotonic()
    deadline = t_start + a.budget
    print(f"[rehearsal] {a.device}, {shape}, budget {a.budget:.0f} s, memory cap "
          f"{a.memory_cap_gib} GiB per part, work in {work}", flush=True)

    def record(part: str, got: dict) -> None:
        report["parts"][part] = judge(part, got, expect)
        report["seconds"] = round(time.monotonic() - t_start, 1)
        save(a.out, report)

    for part in a.parts:
        left = deadline - time.monotonic()
        need = estimate(part, shape).least(1)
        if left - reserve < need:
            record(part, {"outcome": "skipped", "skipped": skip_record(part, shape, need, left - reserve)})
        else:
            limit = min(limits[part], left)
            print(f"[rehearsal] {part} (estimate {need:.0f} s, at most {limit:.0f} s) ...", flush=True)
            record(part, {"outcome": "running", "error": "the call ended while this part ran"})
            got = spawn(opt_file, work, part, limit, lambda doc, part=part: record(
                part, {"outcome": "running", "error": "the call ended while this part ran", "partial": doc}))
            record(part, got)
        got = report["parts"][part]
        print(f"[rehearsal] {part}: {got['status']} in {got.get('seconds')} s"
              + (f": {'; '.join(map(str, got['why']))[:600]}" if got.get("why") else ""), flush=True)
    save(a.out, report)
    _check_out_folder(a.out)
    return _say_summary(a.out, report)
