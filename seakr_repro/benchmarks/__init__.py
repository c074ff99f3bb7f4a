"""The developers' benchmarks, `python -m seakr_repro bench NAME [its options]` (`bench --help`
lists them; `make bench` runs the set it names). Each measures against a baseline in the same run
on the same machine and writes a JSON file. A benchmark's module is `module_name(NAME)`, with
`main(argv) -> dict` (the report; the scale check returns its exit status) and `parser()`.
"""
from __future__ import annotations

import importlib

# name -> what it measures. Modules are imported only when their benchmark runs: most need torch,
# and `bench --help` needs none of them.
BENCHMARKS = {
    "ray-engine": "SeaKR questions per minute, the Ray engine (1 and 2 workers) against local",
    "backends": "seconds per SeaKR question, transformers against vLLM",
    "contention": "decode-like steps alone and beside busy processes, per OpenMP setting",
    "decode": "the shared-prefix decode step per decode path against the card's floor",
    "scale-check": "a paper-scale dry run on CPU (LLaMA-2-7B shapes): RSS, disk, hours",
}


def module_name(name: str) -> str:
    return f"{__name__}.{name.replace('-', '_')}"


def benchmark(name: str):
    if name not in BENCHMARKS:
        raise KeyError(f"no benchmark {name!r}; the benchmarks: {', '.join(BENCHMARKS)}")
    return importlib.import_module(module_name(name))


def run_benchmark(name: str, argv: list[str]):
    """`python -m seakr_repro bench NAME ARGV...`: what the benchmark's main returns."""
    return benchmark(name).main(list(argv))
