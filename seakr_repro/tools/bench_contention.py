"""Decode-step speed alone and beside busy processes, torch's old thread setting against the
package's (`core/threads.py`), measured in one run.

The step is a decode-like loop (30 matmuls of 10 x 576 by 576 x 1,536, SmolLM2's MLP shape at ten
rows). Each measurement runs in a fresh process, because OpenMP reads its wait policy once at
start-up; the busy processes are plain Python loops, one core's worth of work each. Settings and
competitor counts alternate within each repeat, so a machine that speeds up or slows down during
the run affects both settings alike. The figure that matters is the share of its quiet speed a
setting keeps beside two busy processes: four busy threads on two cores make 50% a fair share.
"""
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
# import would set the new setting), and `steps_per_second` runs the same code in this process.
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
CHILD = STEP + """
import json, sys
print(json.dumps({"steps_per_s": steps_per_second(float(sys.argv[1])), "threads": torch.get_num_threads()}))
"""
BUSY = "while True: pass"


def steps_per_second(seconds: float) -> float:
    """The decode-like step's speed in this process (its threads as they are)."""
    scope: dict = {}
    exec(STEP, scope)                     # noqa: S102 - our own constant source, see STEP
    return scope["steps_per_second"](seconds)


def setting_env(name: str) -> dict[str, str]:
    """The environment of one setting: `old` is torch's own (no OpenMP variables: active waiting,
    one thread per core); `new` is what the package sets (`threads.fair_share_env`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    if name == "new":
        env.update(threads.fair_share_env(env))
    return env


def measure(setting: str, competitors: int, seconds: float) -> dict:
    """Steps per second of one fresh process under `setting`, beside `competitors` busy processes."""
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(competitors)]
    try:
        time.sleep(0.3 if competitors else 0)          # let the competitors get going
        out = subprocess.run([sys.executable, "-c", CHILD, str(seconds)], env=setting_env(setting),
                             capture_output=True, text=True, check=True, timeout=60 + 20 * seconds)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        for p in busy:
            p.kill()
            p.wait()


def run(repeats: int, seconds: float, competitors: tuple[int, ...] = (0, 2)) -> dict:
    samples: dict[str, dict[int, list[float]]] = {s: {c: [] for c in competitors} for s in ("old", "new")}
    used_threads = {}
    for r in range(repeats):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for c in competitors:
            for s in order:
                got = measure(s, c, seconds)
                samples[s][c].append(got["steps_per_s"])
                used_threads[s] = got["threads"]
                print(f"  repeat {r + 1}/{repeats}: {s} setting, {c} busy: "
                      f"{got['steps_per_s']:.1f} steps/s", flush=True)
    med = {s: {c: statistics.median(v) for c, v in per.items()} for s, per in samples.items()}
    quiet = competitors[0]
    kept = {s: {c: med[s][c] / med[s][quiet] for c in competitors[1:]} for s in med}
    return {"samples": samples, "median_steps_per_s": med, "share_of_quiet_speed_kept": kept,
            "torch_threads": used_threads}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m seakr_repro.tools.bench_contention",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    ap.add_argument("--competitors", type=int, nargs="+", default=[0, 2],
                    help="busy processes beside the step; the first is the quiet baseline")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "tables" / "default" / "bench_contention.json")
    args = ap.parse_args(argv)
    cpus = threads.usable_cpus()
    print(f"decode-like step, {cpus} usable cores; old = torch's own setting, new = "
          f"{threads.fair_share_env({})}")
    report = run(args.repeats, args.seconds, tuple(args.competitors))
    med, kept = report["median_steps_per_s"], report["share_of_quiet_speed_kept"]
    print(f"\n{'busy processes':<16}{'old steps/s':>13}{'new steps/s':>13}{'new/old':>9}")
    for c in args.competitors:
        print(f"{c:<16}{med['old'][c]:>13.1f}{med['new'][c]:>13.1f}{med['new'][c] / med['old'][c]:>8.2f}x")
    for c in args.competitors[1:]:
        fair = cpus / (cpus + c) if c else 1.0
        print(f"beside {c} busy: old keeps {kept['old'][c]:.0%} of its quiet speed, new keeps "
              f"{kept['new'][c]:.0%} (a fair share of {cpus} cores: {fair:.0%})")
    report.update(what="decode-like steps per second alone and beside busy processes",
                  usable_cpus=cpus, repeats=args.repeats, seconds=args.seconds,
                  new_setting=threads.fair_share_env({}))
    save_json(report, args.out)
    print(f"saved {args.out}")
    return report


if __name__ == "__main__":
    main()
