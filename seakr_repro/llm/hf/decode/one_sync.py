"""`one_sync`: one host read-back per step; the next inputs and positions stay on the device.

Each live row's generated keys and values grow in a DynamicCache; a finished row is dropped from
its cache and the batch (a host-to-device copy only on such steps). Parts of `rows_per_forward`
rows stay in lockstep, drawing as one part would; the parts not running keep their caches in
host memory, so the retry's peak falls with the rows per pass and nothing else changes.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .. import host_memory
from .. import shared_prefix as sp
from .base import Batch, DecodePath, StepDraws, ForwardPasses, read_back_once


class DynamicRows(ForwardPasses):
    """The live rows in parts of `rows_per_forward`, each over a DynamicCache of its generated
    tokens. With several parts where host and card are apart, a part's cache is on the card only
    for its pass (the part that ran last: until the next step's first pass)."""

    def __init__(self, backend, batch: Batch):
        from transformers import DynamicCache

        self.backend, self.batch = backend, batch
        cap = backend.rows_per_forward or len(batch.live)
        offload = len(batch.live) > cap and host_memory.separate(backend.device)
        self.parts = [(DynamicCache(), batch.live[i:i + cap], host_memory.HostSuffix(batch.slots) if offload else None)
                      for i in range(0, len(batch.live), cap)]
        self.on_card = None                  # with host memory: the cache that ran last
        self.step = 0
        self.start()

    def start(self) -> None:
        # each live row's first position (its prompt's length), on the device
        self.first_pos = torch.tensor(self.batch.first_positions(self.batch.live), device=self.backend.device)

    def kept(self, drawn: StepDraws, keep: Sequence[int]) -> None:
        """Keep the next inputs of the rows that go on."""
        self.nxt = drawn.tokens
        if len(keep) < len(drawn.ids):
            idx = torch.tensor(list(keep), device=self.backend.device)
            self.nxt, self.first_pos = self.nxt[idx], self.first_pos[idx]

    def inputs(self, at: int, members: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(input tokens, positions) of the part whose rows are live rows at..at + len(members)."""
        n = len(members)
        return self.nxt[at:at + n, None], self.first_pos[at:at + n, None] + self.step

    def next_logits(self, drawn: StepDraws, keep: Sequence[int]) -> torch.Tensor:
        self.kept(drawn, keep)
        live = set(self.batch.live)
        dev = self.backend.device
        parts, at = [], 0
        for cache, members, host in self.parts:    # the parts' members, in order, are the live rows
            local = [j for j, r in enumerate(members) if r in live]
            if not local:
                continue
            if len(local) < len(members) and self.step > 0:    # drop the part's finished rows
                if host is not None:
                    host.keep_rows(local)
                if host is None or cache is self.on_card:
                    cache.batch_select_indices(torch.tensor(local, device=dev))
            parts.append((cache, [members[j] for j in local], host, at))
            at += len(local)
        self.parts = [p[:3] for p in parts]
        if all(p[0] is not self.on_card for p in parts):
            self.on_card = None                 # its rows all finished: it leaves the card
        outs = {}
        for cache, members, host, at in parts[::-1] if self.step % 2 else parts:
            if host is not None and cache is not self.on_card:
                if self.on_card is not None:
                    host_memory.drop_from_card(self.on_card)
                host.load(cache, dev)
            sp.set_groups(self.batch.groups(members))
            inp, pos = self.inputs(at, members)
            outs[at] = self.backend.forward(inp, cache, pos).logits[:, -1, :]
            if host is not None:
                host.save(cache)
                self.on_card = cache
        self.step += 1
        return torch.cat([outs[a] for a in sorted(outs)])


class OneSync(DecodePath):
    name = "one_sync"

    def draw(self, batch: Batch, logits: torch.Tensor) -> StepDraws:
        return read_back_once(batch, logits)

    def passes(self, backend, batch: Batch) -> ForwardPasses:
        return DynamicRows(backend, batch)
