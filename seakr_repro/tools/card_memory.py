"""What the GPU rehearsal's parts report about the card: the memory cap each part runs under, and
how much of the card is in use beyond torch's own reserved memory.

The cap: the paper profile's card is 24 GB, lent machines have larger ones (an 80 GB H100), so
each part caps torch's allocator with `torch.cuda.set_per_process_memory_fraction` (what torch
allows itself, not what the card has). A real 24 GiB card also holds the CUDA context and the
libraries' modules outside torch's allocator, so the cap given to torch is the cap minus what is
outside torch when the part starts: the part then has what a 24 GiB card would leave it.

Outside torch: `torch.cuda.mem_get_info`'s total - free (everything in use on the card, by any
process) minus `torch.cuda.memory_reserved()` (what this process's torch holds). The CUDA context
and the kernels loaded into it are in it too (not yet measured for this package on a GPU: the
rehearsal's `card.cap.outside_torch_at_start_gib` is that reading); much more is another process
or a library that took the card behind torch's back (JAX: 75% at its first use; core/jax_env.py).
"""
from __future__ import annotations

from ..core.device import cuda_available as _cuda

GiB = 2**30


def outside_torch_bytes() -> int | None:
    """Bytes of the card in use beyond this process's torch reserved memory (None without CUDA)."""
    if not _cuda():
        return None
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free - torch.cuda.memory_reserved())


def apply_cap(cap_gib: float | None) -> dict:
    """Cap torch's allocator so the part has what a `cap_gib` card would leave it; returns what the
    report says about it."""
    if cap_gib is None:
        return {"cap_gib": None, "applied": False, "why": "no cap asked (--memory-cap-gib none)"}
    if not _cuda():
        return {"cap_gib": cap_gib, "applied": False, "why": "no CUDA GPU: nothing to cap"}
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    outside = outside_torch_bytes()        # the CUDA context, made by mem_get_info if not before
    out = {"cap_gib": cap_gib, "card_gib": round(total / GiB, 2), "outside_torch_at_start_gib": round(outside / GiB, 2)}
    if cap_gib * GiB >= total:
        return {**out, "applied": False, "why": f"the card has {total / GiB:.1f} GiB, not more than the cap"}
    fraction = max(0.0, cap_gib * GiB - outside) / total
    torch.cuda.set_per_process_memory_fraction(fraction)
    return {**out, "applied": True, "torch_fraction": round(fraction, 4),
            "torch_may_use_gib": round(fraction * total / GiB, 2)}


class CardWatch:
    """The card's use outside torch, sampled where a part asks (after each model build, method,
    question) and at its end: the worst sample and where it was, and the last."""

    def __init__(self):
        self.worst: float | None = None
        self.worst_at: str | None = None
        self.last: float | None = None
        self.samples = 0

    def sample(self, where: str) -> None:
        got = outside_torch_bytes()
        if got is None:
            return
        gib = round(got / GiB, 2)
        self.samples += 1
        self.last = gib
        if self.worst is None or gib > self.worst:
            self.worst, self.worst_at = gib, where

    def report(self) -> dict:
        if not self.samples:
            return {"outside_torch_gib": None, "outside_torch_why": "no CUDA GPU: nothing outside torch to measure"}
        return {"outside_torch_gib": {"worst": self.worst, "worst_at": self.worst_at, "end": self.last,
                                      "samples": self.samples}}
