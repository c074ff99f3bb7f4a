"""The device a rehearsal part runs on: whether it is CUDA, the dtype its models load in, and the
most memory torch allocated (the GPU's, or a simulated card's on a CPU).
"""
from __future__ import annotations


def is_cuda(device: str) -> bool:
    return device == "cuda"


def model_dtype(device: str) -> str:
    """The dtype the rehearsal's models load in: the paper profile's float16 on a GPU, float32 on a CPU."""
    return "float16" if is_cuda(device) else "float32"


def reset_peak(device: str) -> None:
    import torch

    from ..doubles.simulated_card import active

    if is_cuda(device):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    elif active() is not None:
        active().reset_peak()


def peak_bytes(device: str) -> int | None:
    """torch's most bytes allocated since the last `reset_peak`: the GPU's, or on a CPU the
    simulated card's where one is active (doubles/simulated_card.py); else None."""
    import torch

    from ..doubles.simulated_card import active

    if is_cuda(device):
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())
    return None if active() is None else active().peak


def peak_gib(device: str) -> float | None:
    peak = peak_bytes(device)
    return None if peak is None else round(peak / 2**30, 2)
