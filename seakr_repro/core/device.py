"""Where the model runs: `model.device` (auto | cpu | cuda) resolved on this machine, and the
record of it (device, GPU name, dtype) that every artifact's provenance carries and the tables print.

`auto` is CUDA when torch sees a GPU, else the CPU; a profile's `gpu:` section applies only when
it resolves to CUDA (core/config.py). torch is imported only when a setting needs resolving."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .errors import UserError

DEVICES = ("auto", "cpu", "cuda")


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU. On Linux without NVIDIA's or ROCm's device files it cannot,
    and torch is not imported for the answer (loading a profile stays quick: status, cost)."""
    import sys
    if "torch" not in sys.modules and sys.platform.startswith("linux") and not _gpu_driver_files():
        return False
    import torch
    return bool(torch.cuda.is_available())


def _gpu_driver_files() -> bool:
    from pathlib import Path
    return (Path("/proc/driver/nvidia").exists() or Path("/dev/kfd").exists()
            or any(Path("/dev").glob("nvidia[0-9]*")))


def usable_gpu_bytes(index: int = 0) -> int | None:
    """GPU memory this process may use: the card's total, or the share a
    `torch.cuda.set_per_process_memory_fraction` cap allows (the card check's 24 GiB). None
    where torch sees no CUDA GPU. The card's size, not what is free now: a decision taken on it
    (`llm.gpu_fit.dtype_that_fits`) does not change with what else happens to run on the card."""
    if not cuda_available():
        return None
    import torch
    total = torch.cuda.get_device_properties(index).total_memory
    return int(total * min(1.0, torch.cuda.get_per_process_memory_fraction(index)))


def resolve_device(device: str) -> str:
    """cpu or cuda for a `model.device` setting (auto: cuda when torch sees a GPU)."""
    if device not in DEVICES:
        raise UserError(f"unknown device '{device}'", setting="model.device",
                        fix="use auto, cpu or cuda")
    if device == "cpu":
        return "cpu"
    if cuda_available():
        return "cuda"
    if device == "cuda":
        raise UserError("model.device is cuda but torch sees no CUDA GPU", setting="model.device",
                        fix="set model.device: cpu (or auto), or install a CUDA build of torch")
    return "cpu"


def compute(cfg) -> dict[str, Any]:
    """{device, gpu, dtype, setting} of the profile's model on this machine: what provenance
    records. A `cuda` setting with no GPU (rendering elsewhere) is recorded as unavailable."""
    setting = cfg.get("model.device", "auto")
    try:
        device = resolve_device(setting)
    except UserError:
        device = f"{setting} (unavailable)"
    gpu = None
    if device == "cuda":
        import torch
        gpu = torch.cuda.get_device_name(0)
    return {"device": device, "gpu": gpu, "dtype": cfg.get("model.dtype", "float32"),
            "setting": setting, "backend": cfg.get("model.backend", "hf")}


def describe(record: Mapping[str, Any] | None) -> str:
    """'CPU, float32' / 'GPU (NVIDIA H100), bfloat16' for one compute record."""
    if not record:
        return "device and dtype not recorded"
    device = record.get("device")
    where = (f"GPU ({record['gpu']})" if device == "cuda" and record.get("gpu")
             else "CPU" if device == "cpu" else str(device))
    return f"{where}, {record.get('dtype')}"


def compute_note(records: Iterable[Mapping[str, Any] | None]) -> str:
    """One sentence for a table: where the results it shows were computed (several kinds: each)."""
    kinds = list(dict.fromkeys(describe(r) for r in records))
    if not kinds:
        return ""
    if kinds == [describe(None)]:
        return "Device and dtype not recorded (results written before provenance recorded them)."
    if len(kinds) == 1:
        return f"Computed on {kinds[0]}."
    return "Computed on a mix of machines: " + "; ".join(kinds) + "."
