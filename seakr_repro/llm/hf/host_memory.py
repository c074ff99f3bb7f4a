"""Host memory: where a decode call keeps the rows of the parts that are not running (the
out-of-memory retry's parts), so the card holds one part's suffix keys and values at a time. Copies
there and back are exact, so tokens and vectors are those of a call that kept every row on the card.

A dynamic part's `HostSuffix` is allocated once at full length (pinned on a GPU machine) and gets
one slot per step; the parts alternate direction each step so that the last one stays on the card
(`step_copies`; docs/speed.md, "Speed", gives the traffic at LLaMA-2-7B's shape). On a CPU nothing
moves (`separate`) unless a simulated card (`doubles/simulated_card.py`) sets `simulate_on_cpu`;
it does not count tensors made while `allocating_on_host()` holds.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Sequence

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


def to_card(t: torch.Tensor, device) -> torch.Tensor:
    """A host tensor's values on the card (`device`): a copy, behind the step from pinned memory."""
    device = torch.device(device)
    if device.type != "cpu":
        return t.to(device, non_blocking=True)
    return t.clone() if simulate_on_cpu else t


def to_host(host: torch.Tensor, t: torch.Tensor) -> None:
    """Copy the card's `t` into `host` (behind the step where pinned: the read-back waits for it)."""
    host.copy_(t, non_blocking=True)


def host_zeros(*shape: int, like: torch.Tensor) -> torch.Tensor:
    """A zeroed host buffer of `like`'s dtype (pinned on a GPU machine: copies need no staging)."""
    if like.device.type != "cpu":
        return torch.zeros(*shape, dtype=like.dtype, pin_memory=True)
    with _on_host():
        return torch.zeros(*shape, dtype=like.dtype)


def step_copies(slot_bytes: int, rows: Sequence[int], step: int) -> tuple[int, int]:
    """(bytes to the card, bytes to the host) of decode step `step` (from 0) of parts of `rows`
    rows, in the order they run, where `slot_bytes` is one row's keys and values of one token in
    every layer: every part's new slot goes to the host; the `step` slots written so far come to
    the card for every part but the first, which ran last on the step before and is still there."""
    return slot_bytes * step * (sum(rows) - rows[0]), slot_bytes * sum(rows)


class HostSuffix:
    """One part's generated keys and values per layer, slots x rows x kv heads x head dim
    (slot-major: the slots written so far are one stretch), allocated at its first slot."""

    def __init__(self, slots: int):
        self.slots, self.filled, self.rows, self.bufs = slots, 0, 0, []

    def _view(self, buf: torch.Tensor) -> torch.Tensor:
        return buf[:self.slots * self.rows * self.inner.numel()].view(self.slots, self.rows, *self.inner)

    def save(self, cache) -> None:
        """Copy the slot each layer's pass just wrote (its last) to the host."""
        layers = [t for lay in cache.layers for t in (lay.keys, lay.values)]
        if not self.bufs:
            rows, heads, _, dim = cache.layers[0].keys.shape
            self.rows, self.inner = rows, torch.Size((heads, dim))
            self.bufs = [host_zeros(self.slots * rows * heads * dim, like=t) for t in layers]
        for buf, t in zip(self.bufs, layers):
            to_host(self._view(buf)[self.filled], t[:, :, -1])
        self.filled += 1

    def load(self, cache, device) -> None:
        """The slots written so far back on the card as the cache's keys and values."""
        for i, lay in enumerate(cache.layers):
            lay.keys, lay.values = (to_card(self._view(b)[:self.filled], device).permute(1, 2, 0, 3)
                                    for b in self.bufs[2 * i:2 * i + 2])

    def keep_rows(self, local: Sequence[int]) -> None:
        """Keep the rows at these positions of the part's, in order (the others finished)."""
        if not self.bufs:
            return
        idx = torch.tensor(list(local))
        with _on_host():
            kept = [self._view(b)[:self.filled].index_select(1, idx) for b in self.bufs]
            self.rows = len(local)
            for b, k in zip(self.bufs, kept):
                self._view(b)[:self.filled].copy_(k)


def drop_from_card(cache) -> None:
    """Drop a cache's keys and values from the card (its host copy has them)."""
    for lay in cache.layers:
        lay.keys = lay.values = None
