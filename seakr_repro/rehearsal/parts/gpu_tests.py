"""gpu_tests: the test suite's GPU tests on the GPU (the fused attention kernels and the decode
paths' tests have run on no GPU before the rehearsal).

`pytest -m gpu` over the test modules that mark tests gpu (`gpu_test_modules`: only they are
imported, so modules needing nbformat or Ray, absent on a GPU machine, are not collected for
nothing), in a child process that takes the part's cap and reports its torch memory to the part
(`-p seakr_repro.rehearsal.pytest_plugin`). ok (verdicts._gpu_tests): exit 0, no failure, no
error (a collection error is one), and on cuda at least one test passed.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from ...core.paths import REPO_ROOT


def gpu_test_modules(paths: list[str]) -> list[str]:
    """The test modules to run with `-m gpu`: in each folder given, the modules that mark tests
    `gpu`; a file given is taken as it is (a missing one fails)."""
    out = []
    for given in paths:
        path = Path(given) if Path(given).is_absolute() else REPO_ROOT / given
        if path.is_dir():
            out += [str(f.relative_to(REPO_ROOT)) for f in sorted(path.glob("test_*.py"))
                    if re.search(r"pytest\.mark\.gpu\b", f.read_text(encoding="utf-8"))]
        else:
            out.append(given)
    return out


def run(ctx) -> dict:
    import xml.etree.ElementTree as ET

    xml = ctx.work / "gpu-tests.xml"
    xml.unlink(missing_ok=True)
    modules = gpu_test_modules(ctx.opt.gpu_tests)
    # no --continue-on-collection-errors: a GPU test module that does not import is a failure
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           "-p", "seakr_repro.rehearsal.pytest_plugin", f"--junitxml={xml}", *modules]
    ctx.watch.sample("pytest")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-2000:], flush=True)
    out = {"command": " ".join(cmd[2:]), "modules": modules, "rc": proc.returncode,
           "pytest_seconds": round(time.perf_counter() - t0, 1)}
    if not xml.is_file():
        out["output"] = (proc.stdout + proc.stderr)[-1500:]
        return out
    suite = ET.parse(xml).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    out.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
    out["passed"] = out["tests"] - out["failures"] - out["errors"] - out["skipped"]
    out["cases"] = {}
    for case in suite.iter("testcase"):
        bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        out["cases"][f"{case.get('classname')}::{case.get('name')}"] = {
            "result": bad.tag if bad is not None else "passed", "seconds": float(case.get("time", 0)),
            **({"message": (bad.get("message") or "")[:500]} if bad is not None else {})}
    return out
