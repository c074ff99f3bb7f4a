"""`python`: the decode loop as first written, the baseline the other paths are checked against:
several host read-backs per step, inputs and positions built from Python lists on the host."""
from __future__ import annotations

from typing import Sequence

import torch

from .base import Batch, DecodePath, StepDraws, ForwardPasses, read_back_each
from .one_sync import DynamicRows


class HostInputRows(DynamicRows):
    """`DynamicRows` whose inputs and positions are new tensors made from the host's lists."""

    def start(self) -> None:
        pass

    def kept(self, drawn: StepDraws, keep: Sequence[int]) -> None:
        self.ids = [drawn.ids[j] for j in keep]      # the live rows' next tokens, in live order

    def inputs(self, at: int, members: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        dev = self.backend.device
        pos = self.batch.first_positions(members)
        return (torch.tensor([[t] for t in self.ids[at:at + len(members)]], device=dev),
                torch.tensor([[p + self.step] for p in pos], device=dev))


class PythonLoop(DecodePath):
    name = "python"

    def draw(self, batch: Batch, logits: torch.Tensor) -> StepDraws:
        return read_back_each(batch, logits)

    def passes(self, backend, batch: Batch) -> ForwardPasses:
        return HostInputRows(backend, batch)
