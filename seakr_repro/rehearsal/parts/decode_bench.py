"""decode_bench: every decode path's step against the card's floor (weights over the measured
copy bandwidth), with each path checked against the reference path: the decode benchmark
(`main(argv) -> report`) at 20 rows over a 1,500-token shared prompt, fewer steps and repeats
than its own defaults so it fits the one call; at the tiny shape on a CPU a short run of the same
code. The benchmark writes its timings to `--out` before it runs its checks, and `--out` is this
part's partial file: when a check raises (an out-of-memory error, say) or the part runs out of
time, the report keeps every path's timings. The graph path's step is timed over its replays,
its captures apart (where no CUDA exists it runs as the static step: doubles/simulated_graph.py).
ok (verdicts._decode_bench): every path's tokens and vectors agree with the reference path (the
benchmark's `checks`), no path's timed run raised, the benchmark's own `ok` is true, and the
graph path (on cuda, or wherever it ran) captured and replayed in every timed call.
"""
from __future__ import annotations

from ...benchmarks import decode as benchmark
from ..device import model_dtype
from ..stand_ins import tokenizer_dir

# the one call's run at LLaMA-2-7B's shape: 2 alternating repeats of 50 steps per path
PAPER_ARGS = ("--new-tokens", "50", "--repeats", "2")
TINY_ARGS = ("--rows", "6", "--prompt-tokens", "300", "--new-tokens", "12", "--repeats", "1", "--copy-mib", "16")


def run(ctx) -> dict:
    args = ["--tokenizer", str(tokenizer_dir(ctx.work)), "--device", ctx.device, "--shape", ctx.shape,
            "--dtype", model_dtype(ctx.device), *(PAPER_ARGS if ctx.paper_shape else TINY_ARGS),
            "--out", str(ctx.partial_path)]
    ctx.watch.sample("decode benchmark")
    return {"args": " ".join(args), **benchmark.main(args)}
