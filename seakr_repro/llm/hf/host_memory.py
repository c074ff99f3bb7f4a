"""Host memory: where a decode call keeps the rows of the parts that are not running, so the card
holds one part's suffix keys and values at a time (the out-of-memory retry's parts:
`decode/one_sync.DynamicRows`, `decode/static.StaticRows`). Copies there and back are exact: the
same bits come back, so the tokens and vectors are those of a call that kept every row on the card.

On a GPU the host is the CPU's memory. On a CPU the card and the host are one memory: nothing
moves (`separate(device)` is False) unless a simulated card tells them apart
(`doubles/simulated_card.py` counts the bytes of live tensors as the card's, except those made
while `allocating_on_host()` holds, and turns `simulate_on_cpu` on while it is active).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

_STATE = threading.local()
# set by a simulated card while it counts a CPU's tensors as a card's (tests, the card check on CPU)
simulate_on_cpu = False


def separate(device) -> bool:
    """Whether rows moved off the card on `device` free any of its memory."""
    return torch.device(device).type != "cpu" or simulate_on_cpu


def allocating_on_host() -> bool:
    """True while this thread makes host copies (what a simulated card does not count)."""
    return getattr(_STATE, "host", False)


@contextlib.contextmanager
def _on_host() -> Iterator[None]:
    before = allocating_on_host()
    _STATE.host = True
    try:
        yield
    finally:
        _STATE.host = before


def off_card(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values in host memory (a copy; `t` itself where host and card are one memory)."""
    if t.device.type != "cpu":
        return t.to("cpu")
    if not simulate_on_cpu:
        return t
    with _on_host():
        return t.clone()


def to_card(t: torch.Tensor, device) -> torch.Tensor:
    """`t`'s values on the card (`device`): a copy of a host tensor `off_card` made."""
    device = torch.device(device)
    if device.type != "cpu":
        return t.to(device)
    return t.clone() if simulate_on_cpu else t


def host_zeros(*shape: int, like: torch.Tensor) -> torch.Tensor:
    """A zeroed host buffer of `like`'s dtype (pinned on a GPU machine, so copies to and from the
    card need no staging)."""
    if like.device.type != "cpu":
        return torch.zeros(*shape, dtype=like.dtype, pin_memory=True)
    with _on_host():
        return torch.zeros(*shape, dtype=like.dtype)


def move_cache(cache, move) -> None:
    """Replace each layer's keys and values of a transformers cache by `move(tensor)` (a layer not
    yet filled is left alone)."""
    for lay in cache.layers:
        for name in ("keys", "values"):
            t = getattr(lay, name, None)
            if isinstance(t, torch.Tensor):
                setattr(lay, name, move(t))
