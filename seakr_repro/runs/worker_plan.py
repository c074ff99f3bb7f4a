"""How many Ray workers a cluster gets and what each asks Ray for: one GPU per worker (or vLLM's
tensor-parallel size) where the model runs on GPUs, else an equal share of the CPUs."""
from __future__ import annotations

from ..core.errors import UserError


def wants_gpu(cfg, resources: dict) -> bool:
    """Whether workers take a GPU each: model.device cuda, or auto on a cluster that has GPUs."""
    if cfg.get("model.backend", "hf") == "synthetic":
        return False
    device = cfg.get("model.device", "auto")
    if device == "cuda" and not resources.get("GPU"):
        raise UserError("model.device is cuda but the Ray cluster has no GPU "
                        f"(it offers {_offer(resources)})", setting="runner.ray_address",
                        fix="join a cluster whose nodes have GPUs (`ray start` on each GPU node), or "
                            "set model.device: auto or cpu to run on CPU workers")
    return device == "cuda" or (device == "auto" and bool(resources.get("GPU")))


def gpus_per_worker(cfg) -> int:
    """1, or vLLM's tensor_parallel_size where a number is set (auto: 1, one card needs no split)."""
    tp = cfg.get("model.vllm.tensor_parallel_size", "auto")
    return int(tp) if cfg.get("model.backend", "hf") == "vllm" and isinstance(tp, int) else 1


def plan_workers(cfg, resources: dict) -> tuple[int, dict]:
    """(number of workers, Ray resources of each) for a cluster offering `resources`: runner.workers
    (auto: one per GPU, or per CPU on a CPU cluster), each with its GPUs or a share of the CPUs."""
    setting = cfg.get("runner.workers", "auto")
    gpus, cpus = float(resources.get("GPU", 0)), float(resources.get("CPU", 0))
    if setting != "auto" and (not isinstance(setting, int) or setting < 1):
        raise UserError(f"runner.workers is {setting!r}", setting="runner.workers",
                        fix="give a number of workers (1 or more) or auto")
    if wants_gpu(cfg, resources):
        per = gpus_per_worker(cfg)
        n = int(gpus // per) if setting == "auto" else setting
        if n < 1 or n * per > gpus:
            raise UserError(f"{n or 1} worker(s) x {per} GPU(s) each, but the Ray cluster has "
                            f"{gpus:g} GPU(s)", setting="runner.workers",
                            fix=f"set runner.workers: auto (= {int(gpus // per)} here) or fewer, or "
                                "add GPU nodes to the cluster")
        return n, {"num_gpus": per, "num_cpus": min(1.0, cpus / n) if cpus else 0}
    if cpus < 1:
        raise UserError(f"the Ray cluster offers no CPU ({_offer(resources)})",
                        setting="runner.ray_address", fix="start the cluster with CPUs (ray start --num-cpus N)")
    n = int(cpus) if setting == "auto" else setting
    return n, {"num_gpus": 0, "num_cpus": cpus / n}


def resources_in_words(each: dict) -> str:
    """A worker's Ray resources (`plan_workers`' second value) in words: "1 GPU, 1 CPU"."""
    return ", ".join(f"{each[k]:g} {name}" for k, name in (("num_gpus", "GPU"), ("num_cpus", "CPU"))
                     if each.get(k))


def _offer(resources: dict) -> str:
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in ("CPU", "GPU"))
