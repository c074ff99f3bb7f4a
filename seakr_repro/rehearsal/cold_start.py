"""What a part's process spends before its work, timed here in fresh processes from a pack without
bytecode, and the bytecode compile that the call makes at its start: the figures plan.py's
estimates take their process start and imports from (data/measured/rehearsal_cold_start.json).

    python -m seakr_repro.rehearsal.cold_start [--out FILE] [--repeats 3]

It lays out what a lent machine gets, here: a copy of the package (the checkout's tracked files
of seakr_repro/) and of the packages the pack carries (scripts/gpu_rehearsal_packages.txt and
scripts/gpu_rehearsal_ray.txt, the files of each as installed here), none with bytecode, and
torch and transformers from this environment, with theirs (the image's are installed, so they
are taken to have it). Then, each in a fresh process, median of `--repeats`:
- `start`: what a part's process imports before it runs the part (the driver, the child, the
  parts' table), from the interpreter's start to the end of those imports;
- `imports`: each import list of import_lists.py (TORCH, MODEL, PIPELINE), timed inside the
  process after its start;
- `every_module`: what the env part does, importing every module of the package;
each `cold` (no bytecode: every module of the package and the pack compiled as it is imported,
and not written) and `warm` (after `compile`), in wall seconds and in the process's CPU seconds
(on a busy machine the wall time stretches with the load, the CPU time much less: plan.py takes
the CPU seconds; on an idle machine the two agree);
- `compile`: `python -m compileall -q` over the pack's packages and the package, with one
  process (`serial_s`) and with one per core here (`parallel_s`, `jobs`): what the call does once
  at its start (scripts/gpu_rehearsal.sh), so every part imports warm.
The file records the machine, its load average before and after, and whether it was busy (load
average over half its cores): figures taken busy overstate an idle machine's, in wall time most.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from ..core.io import write_json
from ..core.paths import DATA_DIR, REPO_ROOT

RECORD = DATA_DIR / "measured" / "rehearsal_cold_start.json"
PACK_LISTS = ("scripts/gpu_rehearsal_packages.txt", "scripts/gpu_rehearsal_ray.txt")
START = ("seakr_repro.rehearsal.driver", "seakr_repro.rehearsal.child", "seakr_repro.rehearsal.parts")


def read_record(path: Path = RECORD) -> dict | None:
    """The measured figures (None where the file is absent)."""
    return json.loads(path.read_text()) if path.is_file() else None


def _pack_distributions() -> list[str]:
    names = []
    for rel in PACK_LISTS:
        for line in (REPO_ROOT / rel).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                names.append(line.split("==", 1)[0])
    return names


def lay_out(folder: Path) -> dict:
    """`folder`/site: the pack's distributions installed here, their files copied without
    bytecode; `folder`/checkout: the tracked files of seakr_repro/. What was not installed here
    is listed, not copied."""
    site, checkout = folder / "site", folder / "checkout"
    missing, copied = [], 0
    for name in _pack_distributions():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        for f in dist.files or ():
            if "__pycache__" in f.parts or f.suffix == ".pyc" or f.parts[0] == ".." or f.parts[0] == "bin":
                continue
            src = Path(dist.locate_file(f))
            if src.is_file():
                dst = site / f
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
                copied += 1
    tracked = subprocess.run(["git", "ls-files", "seakr_repro", "requirements.txt", "requirements-nodeps.txt",
                              "params"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        dst = checkout / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, dst)
    return {"pack_files": copied, "package_files": len(tracked), "not_installed_here": missing}


def _env(folder: Path, bytecode: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEAKR_")}
    env["PYTHONPATH"] = f"{folder / 'checkout'}{os.pathsep}{folder / 'site'}"
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed_imports(folder: Path, modules: tuple[str, ...], walk: bool = False) -> tuple[float, float]:
    """(wall, CPU) seconds a fresh process spends importing `modules` (after its start, START
    imported first and not counted), or walking every module of the package (`walk`)."""
    code = ("import importlib, json, pkgutil, time\n"
            f"for m in {list(START)!r}: importlib.import_module(m)\n"
            "t, c = time.perf_counter(), time.process_time()\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n")
    if walk:
        code += ("import seakr_repro\n"
                 "for i in pkgutil.walk_packages(seakr_repro.__path__, 'seakr_repro.'):\n"
                 "    if not i.name.endswith('__main__'):\n"
                 "        try: importlib.import_module(i.name)\n"
                 "        except Exception: pass\n")
    code += "print(json.dumps([time.perf_counter() - t, time.process_time() - c]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=folder, env=_env(folder, False),
                         capture_output=True, text=True, check=True)
    wall, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return wall, cpu


def _timed_start(folder: Path) -> tuple[float, float]:
    t, c = time.perf_counter(), _children_cpu()
    subprocess.run([sys.executable, "-c", "; ".join(f"import {m}" for m in START)], cwd=folder,
                   env=_env(folder, False), check=True)
    return time.perf_counter() - t, _children_cpu() - c


def _compile(folder: Path, jobs: int) -> tuple[float, float]:
    t, c = time.perf_counter(), _children_cpu()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", str(jobs), str(folder / "site"),
                    str(folder / "checkout" / "seakr_repro")], cwd=folder, env=_env(folder, True),
                   stdout=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t, _children_cpu() - c


def _clear_bytecode(folder: Path) -> None:
    for d in folder.rglob("__pycache__"):
        shutil.rmtree(d, ignore_errors=True)


def _median(runs: list[tuple[float, float]]) -> dict[str, float]:
    return {"wall": round(statistics.median(w for w, _ in runs), 2),
            "cpu": round(statistics.median(c for _, c in runs), 2)}


def measure(repeats: int = 3) -> dict:
    from ..core.provenance import git_revision
    from .import_lists import LISTS as lists

    med = lambda f: _median([f() for _ in range(repeats)])      # noqa: E731
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="seakr-cold-start-") as d:
        folder = Path(d)
        laid = lay_out(folder)
        fig: dict = {"start": {}, "imports": {k: {} for k in lists}, "every_module": {}}
        for state in ("cold", "warm"):
            _clear_bytecode(folder)
            if state == "warm":
                jobs = os.cpu_count() or 1
                serial = _compile(folder, 1)
                _clear_bytecode(folder)
                parallel = _compile(folder, jobs)
                fig["compile"] = {"serial": _median([serial]), "parallel": _median([parallel]), "jobs": jobs}
            fig["start"][state] = med(lambda: _timed_start(folder))
            for k, mods in lists.items():
                fig["imports"][k][state] = med(lambda mods=mods: _timed_imports(folder, mods))
            fig["every_module"][state] = med(lambda: _timed_imports(folder, (), walk=True))
    load_after = os.getloadavg()
    cpus = os.cpu_count() or 1
    busy = max(load_before[0], load_after[0]) > cpus / 2
    import torch
    import transformers
    return {"what": "process start, imports and the bytecode compile of the rehearsal's parts, from a pack "
                    "without bytecode (python -m seakr_repro.rehearsal.cold_start): wall and CPU seconds, "
                    "median of the repeats",
            "commit": git_revision()["revision"], "date": time.strftime("%Y-%m-%d"),
            "machine": {"cpus": cpus, "processor": _processor(), "python": platform.python_version(),
                        "torch": torch.__version__, "transformers": transformers.__version__,
                        "load_average_before": [round(x, 2) for x in load_before],
                        "load_average_after": [round(x, 2) for x in load_after], "busy": busy},
            "repeats": repeats, "laid_out": laid, "seconds": fig}


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m seakr_repro.rehearsal.cold_start",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=RECORD,
                   help=f"the record to write (default {RECORD.relative_to(REPO_ROOT)})")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    doc = measure(a.repeats)
    write_json(a.out, doc, indent=1)
    print(json.dumps(doc["seconds"], indent=1))
    print(f"[cold_start] {a.out}: machine {'BUSY' if doc['machine']['busy'] else 'idle'} "
          f"(load average {doc['machine']['load_average_before']} -> {doc['machine']['load_average_after']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
