"""ray: the Ray engine with one worker holding the GPU, where the pack carried Ray.

SeaKR's first 2Wiki question (paper-tiny) on the local engine, then on the Ray engine with one
worker (`num_gpus` 1 on CUDA: `runs.engine.plan_workers`), the call cache and the derived rows
off so the worker computes every call: its run rows against the local engine's, field by field. The worker takes
the part's cap and reports its torch memory to the part's card sampler (card_memory.join_part,
from its loader); the worker is closed and the cluster shut down before the part ends, and the
part's end waits for the card to settle, so the worker's memory is gone before the last sample.
Without Ray the part reports what it knows (`ray_imports` false, the import error, the pack's
sizes.json) and verdicts.ray_without_ray decides: not run where Ray could not travel, failed
where the pack carried it. ok (verdicts._ray): the same run rows and scores, computed by the
worker, which held one GPU on CUDA.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .. import card_memory
from ..device import is_cuda
from ..stand_ins import RandomLlamaLoader, model_overrides, profile_inputs, run_file_rows, tokenizer_dir
from ..pack import read_sizes


class CountingLoader:
    """The ray part's loader: `inner`'s backend (the profile's cache.enabled off) behind the call
    cache switched off with its counters on, as Table 7 times: the Ray worker computes every call
    instead of reading what the local run cached, and both runs' rows carry calls and tokens. In
    a worker process it first joins the part: the cap, and its torch memory reported."""

    def __init__(self, inner: RandomLlamaLoader, cap_gib: float | None, torch_dir: str | None):
        self.inner, self.cap_gib, self.torch_dir = inner, cap_gib, torch_dir
        self.part_pid = os.getpid()

    def __call__(self, cfg, name: str, dtype: str | None = None):
        from ...llm.cache import CachedBackend

        if os.getpid() != self.part_pid:       # a worker: the part's own process is capped already
            card_memory.join_part(self.cap_gib if is_cuda(self.inner.device) else None, self.torch_dir)
        return CachedBackend(self.inner(cfg, name, dtype), enabled=False)


def _rows(cfg, label: str) -> dict:
    """{question id: its row} of `label`'s run file on 2Wiki, less the seconds it took."""
    return {r["id"]: {k: v for k, v in r.items() if k != "seconds"} for r in run_file_rows(cfg, "2wiki", label)}


def run(ctx) -> dict:
    pack = os.environ.get("REHEARSAL_PACK")
    try:
        import ray
    except ImportError as e:
        return {"ray_imports": False, "import_error": str(e), "pack": pack or ".gpu-rehearsal",
                "pack_sizes": read_sizes(pack)}
    from ...artifacts import spec_for
    from ...runs import engine, grid
    from ...runs.pool import free_accelerator_memory

    cfg, searcher = profile_inputs("paper-tiny", {**model_overrides(ctx.device), "cache.enabled": False}, 1,
                                   ctx.opt.passages)
    loader = CountingLoader(RandomLlamaLoader(ctx.shape, ctx.device, tokenizer_dir(ctx.work)),
                            ctx.opt.memory_cap_gib, os.environ.get(card_memory.TORCH_DIR_ENV))
    pool = grid.BackendPool(cfg, loader=loader)
    try:
        local_res, _ = grid.run_grid(cfg, pool, searcher, [spec_for("seakr")], ["2wiki"], 1, progress=False)
    finally:
        pool.close()                # the worker loads its own model on the same card
        free_accelerator_memory()
    local = _rows(cfg, "seakr")
    got = {"ray_imports": True, "ray_version": ray.__version__, "ray_from": str(Path(ray.__file__).parent),
           "pack_sizes": (read_sizes(pack) or {}).get("sizes"), "local_rows": len(local)}
    ctx.partial(got)
    ctx.watch.sample("ray cluster")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")        # no network there; nothing to report to
    gpus = 0
    if is_cuda(ctx.device):
        import torch
        gpus = torch.cuda.device_count()
    t0 = time.perf_counter()
    # a small object store (as tests/test_ray_engine.py's cluster): the default 30% of the memory
    # made the node's start time out on a busy 2-core machine; the Fleet joins this cluster
    ray.init(num_cpus=max(2, os.cpu_count() or 2), num_gpus=gpus, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", object_store_memory=200 * 2**20)
    # derive_rows off: the seakr-ray row has the local row's configuration, which would answer it
    rcfg = cfg.with_overrides({"runner.engine": "ray", "runner.ray_address": "local", "runner.derive_rows": False})
    try:
        fleet = engine.Fleet(rcfg, 1, loader=loader)
        try:
            got.update(start_seconds=round(time.perf_counter() - t0, 1), worker_resources=dict(fleet.resources),
                       worker=fleet.infos()[0])
            ctx.partial(got)
            ctx.watch.sample("ray worker")
            # another row label, so the Ray run writes its own run file rather than resuming the local one
            ray_res, _ = grid.run_grid(rcfg, engine.FleetPool(fleet), searcher, [spec_for("seakr", "seakr-ray")],
                                       ["2wiki"], 1, progress=False)
        finally:
            fleet.close()           # the worker's model goes before the card's last sample
    finally:
        ray.shutdown()
    remote = _rows(rcfg, "seakr-ray")
    differ = {q: sorted(k for k in set(r) | set(remote.get(q, {})) if r.get(k) != remote.get(q, {}).get(k))
              for q, r in local.items() if r != remote.get(q)}
    pick = lambda df: df[["metric", "value"]].values.tolist()   # noqa: E731
    row = next(iter(remote.values()), {})
    got.update(ran=True, workers=1, ray_rows=len(remote),
               same_rows_as_local=not differ and remote.keys() == local.keys(),
               same_scores_as_local=pick(ray_res) == pick(local_res), differing_fields=differ,
               seconds_per_q=float(ray_res[ray_res.metric == "f1"]["seconds_per_q"].iloc[0]),
               llm_calls=row.get("llm_calls"), llm_cache_hits=row.get("llm_cache_hits"), tokens=row.get("tokens"))
    return got
