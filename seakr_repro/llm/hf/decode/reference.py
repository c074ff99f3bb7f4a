"""The reference path (`shared_prefix=False`, unsupported architectures, a lone greedy `generate`):
one lane whose cache holds the whole prompt in every row, grown in place under the model's own
attention; finished rows are dropped from the cache. Read back as the python path does."""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from .base import Batch, StepDraws, ForwardPasses
from .python_loop import PythonLoop


class CopiedPromptRows(ForwardPasses):
    def __init__(self, backend, batch: Batch):
        if len(batch.lanes) != 1:
            raise ValueError("the reference path decodes one lane over its own copied cache")
        self.backend, self.cache = backend, batch.prefixes[0].cache

    def next_logits(self, drawn: StepDraws, keep: Sequence[int]) -> torch.Tensor:
        nxt = drawn.tokens
        if len(keep) < len(drawn.ids):       # drop finished rows from the batch and the cache
            idx = torch.tensor(list(keep), device=self.backend.device)
            self.cache.batch_select_indices(idx)
            nxt = nxt[idx]
        return self.backend.forward(nxt[:, None], self.cache).logits[:, -1, :]


class Reference(PythonLoop):
    name = "reference"

    def passes(self, backend, batch: Batch) -> ForwardPasses:
        return CopiedPromptRows(backend, batch)

    def attention(self, backend):
        return contextlib.nullcontext()
