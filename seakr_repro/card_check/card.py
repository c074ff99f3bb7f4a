"""The card the check runs on: the CUDA GPU, or on a CPU the simulated card
(doubles/simulated_card.py) the check's process is put on. Peaks are torch's reserved bytes on a
GPU (a `set_per_process_memory_fraction` cap limits what the caching allocator reserves, not what
it has allocated), the simulated card's peak on a CPU."""
from __future__ import annotations

GiB = 2**30


def is_cuda(device: str) -> bool:
    return device == "cuda"


def _sim():
    from ..doubles.simulated_card import active

    return active()


def total_bytes(device: str) -> int:
    if is_cuda(device):
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory)
    return _sim().total


def reset_peak(device: str) -> None:
    """A new peak from here; on a GPU the allocator's cached blocks go first, so the next peak of
    reserved bytes is the next run's own."""
    if is_cuda(device):
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    else:
        _sim().empty_cache()
        _sim().reset_peak()


def peak_bytes(device: str, allocated: bool = False) -> int:
    """The peak of reserved bytes (what a cap limits), or with `allocated` of bytes in tensors."""
    if is_cuda(device):
        import torch

        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() if allocated else torch.cuda.max_memory_reserved())
    return int(_sim().peak_allocated if allocated else _sim().peak)


def allocated_bytes(device: str) -> int:
    if is_cuda(device):
        import torch

        return int(torch.cuda.memory_allocated())
    return int(_sim().allocated)


def set_cap(device: str, cap: int | None) -> None:
    """Let torch hold at most `cap` bytes (None: the whole card)."""
    total = total_bytes(device)
    if is_cuda(device):
        import torch

        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0 if cap is None else min(cap / total, 1.0))
    else:
        _sim().cap = None if cap is None or cap >= total else int(cap)


def apply_cap(device: str, cap_gib: float | None) -> dict:
    """Cap torch at what a `cap_gib` card leaves it: on a GPU the cap less what is in use outside
    torch now (the CUDA context, the driver's share), since a real card of that size holds those
    too. Returns the cap's record."""
    if cap_gib is None:
        return {"cap_gib": None}
    total, outside = total_bytes(device), 0
    if is_cuda(device):
        import torch

        free, total = torch.cuda.mem_get_info()
        outside = total - free - torch.cuda.memory_reserved()
    if cap_gib * GiB >= total:
        return {"cap_gib": cap_gib, "card_gib": round(total / GiB, 1), "applied": False,
                "why": f"the card has {total / GiB:.1f} GiB, not more than the cap"}
    cap = int(cap_gib * GiB - outside)
    set_cap(device, cap)
    return {"cap_gib": cap_gib, "card_gib": round(total / GiB, 1), "applied": True, "torch_bytes": cap,
            "outside_torch_gib": round(outside / GiB, 2)}
