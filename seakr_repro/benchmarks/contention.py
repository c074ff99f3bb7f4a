"""Decode-step speed alone and beside busy processes, for torch's own thread setting and each
candidate setting of the package's (`core/threads.py`), measured in one run (docs/speed.md).

Each measurement runs in a fresh process, because OpenMP reads its wait policy once at start-up;
settings alternate within each repeat and the figures are medians, because the machine's speed
drifts. A setting is kept at 97% or more of torch's quiet speed and 45% or more of its own quiet
speed kept beside two busy processes.

Settings: `unset` (torch's own), `auto` (`threads.apply`), `passive` (OMP_WAIT_POLICY=PASSIVE),
`spin:N` (GOMP_SPINCOUNT=N), `threads:N`; parts combine with "+" ("spin:10000+threads:1")."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..core import threads
from ..core.paths import REPO_ROOT
from ..core.provenance import save_json

# The measured loop, as source: the child processes run it without importing seakr_repro (whose
# import applies the package's setting) except for `auto`, and `steps_per_second` runs the same
# code in this process.
STEP = """
import time, torch
def steps_per_second(seconds):
    x = torch.randn(10, 576)
    ws = [torch.randn(576, 1536) for _ in range(30)]
    def step():
        for w in ws:
            torch.mm(x, w)
    for _ in range(20):
        step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return n / (time.perf_counter() - t0)
"""
CHILD = """
import sys
if sys.argv[2] == "auto":               # importing the package applies its setting, before torch starts
    import seakr_repro  # noqa: F401
""" + STEP + """
import json
print(json.dumps({"steps_per_s": steps_per_second(float(sys.argv[1])), "threads": torch.get_num_threads()}))
"""
BUSY = "while True: pass"


def steps_per_second(seconds: float) -> float:
    """The decode-like step's speed in this process (its threads as they are)."""
    scope: dict = {}
    exec(STEP, scope)                     # noqa: S102 - our own constant source, see STEP
    return scope["steps_per_second"](seconds)


OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
TARGET_ALONE, TARGET_BUSY = 0.97, 0.45       # the two floors a setting must meet (docstring)
SETTINGS = ("unset", "auto", "passive", "spin:10000", "threads:1")


def setting_vars(name: str) -> dict[str, str]:
    """The variables a named setting (the module's note) sets; OMP_NUM_THREADS defaults to the usable cores."""
    if name in ("unset", "auto"):        # auto: the package's, decided as its process starts
        return {}
    out = {"OMP_NUM_THREADS": str(threads.usable_cpus())}
    for part in name.split("+"):
        kind, _, value = part.partition(":")
        if kind == "passive" and not value:
            out["OMP_WAIT_POLICY"] = "PASSIVE"
        elif kind == "spin" and value.isdigit():
            out["GOMP_SPINCOUNT"] = value
        elif kind == "threads" and value.isdigit() and int(value) > 0:
            out["OMP_NUM_THREADS"] = value
        else:
            raise ValueError(f"unknown setting {name!r}: unset, or parts passive, spin:N, threads:N joined by +")
    return out


def setting_env(name: str) -> dict[str, str]:
    """This process's environment with the OpenMP variables of setting `name` only."""
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_VARIABLES + (threads.SET_BY_PACKAGE,)}
    env.update(setting_vars(name))
    return env


def measure(setting: str, competitors: int, seconds: float) -> dict:
    """Steps per second of one fresh process under `setting`, beside `competitors` busy processes."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(competitors)]
    try:
        time.sleep(0.3 if competitors else 0)          # let the competitors get going
        out = subprocess.run([sys.executable, "-c", CHILD, str(seconds), setting], env=setting_env(setting),
                             capture_output=True, text=True, check=True, timeout=60 + 20 * seconds)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        for p in busy:
            p.kill()
            p.wait()


def run(repeats: int, seconds: float, settings: tuple[str, ...] = SETTINGS, busy: int = 2) -> dict:
    """Per repeat and setting (the order rotating): one quiet and one busy measurement, back to back.
    Medians: quiet speed, its ratio to `unset`'s, the share of it kept beside `busy` processes."""
    samples = {s: {"quiet": [], "busy": []} for s in settings}
    used_threads = {}
    for r in range(repeats):
        order = settings[r % len(settings):] + settings[:r % len(settings)]
        for s in order:
            for kind, competitors in (("quiet", 0), ("busy", busy)):
                got = measure(s, competitors, seconds)
                samples[s][kind].append(got["steps_per_s"])
                used_threads[s] = got["threads"]
                print(f"  repeat {r + 1}/{repeats}: {s:<14} {kind:<5} {got['steps_per_s']:7.1f} steps/s", flush=True)
    quiet = {s: statistics.median(v["quiet"]) for s, v in samples.items()}
    kept = {s: statistics.median(b / q for q, b in zip(v["quiet"], v["busy"])) for s, v in samples.items()}
    base = quiet.get("unset")
    alone = {s: (q / base if base else None) for s, q in quiet.items()}
    meets = {s: (alone[s] is not None and alone[s] >= TARGET_ALONE and kept[s] >= TARGET_BUSY)
             for s in settings if s != "unset"}
    return {"samples": samples, "median_quiet_steps_per_s": quiet, "alone_vs_unset": alone,
            "share_kept_beside_busy": kept, "meets_both": meets, "torch_threads": used_threads,
            "busy_processes": busy}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro bench contention",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run")
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside the busy measurements")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS),
                    help="unset (torch's own, the baseline), auto (the package's); else parts passive, "
                         "spin:N, threads:N joined by +")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tables" / "default" / "bench_contention.json")
    return ap


def main(argv=None) -> dict:
    args = parser().parse_args(argv)
    settings = tuple(dict.fromkeys(["unset"] + args.settings))
    cpus = threads.usable_cpus()
    print(f"decode-like step, {cpus} usable cores, {args.repeats} repeats; the package's setting now: "
          f"{threads.fair_share_env({})}")
    report = run(args.repeats, args.seconds, settings, args.busy)
    fair = cpus / (cpus + args.busy)
    print(f"\n{'setting':<16}{'quiet steps/s':>14}{'vs unset':>10}{'kept beside ' + str(args.busy):>16}"
          f"  meets {TARGET_ALONE:.0%} alone and {TARGET_BUSY:.0%} busy")
    for s in settings:
        met = report["meets_both"].get(s)
        print(f"{s:<16}{report['median_quiet_steps_per_s'][s]:>14.1f}{report['alone_vs_unset'][s]:>9.2f}x"
              f"{report['share_kept_beside_busy'][s]:>15.0%}  {'' if met is None else ('yes' if met else 'no')}")
    print(f"(a fair share of {cpus} cores beside {args.busy} busy processes: {fair:.0%})")
    report.update(what="decode-like steps per second alone and beside busy processes, per thread setting",
                  usable_cpus=cpus, repeats=args.repeats, seconds=args.seconds,
                  package_setting=threads.fair_share_env({}),
                  targets={"alone_vs_unset": TARGET_ALONE, "share_kept_beside_busy": TARGET_BUSY})
    save_json(report, args.out)
    print(f"saved {args.out}")
    return report

