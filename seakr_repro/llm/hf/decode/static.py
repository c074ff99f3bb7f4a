"""`static`: one_sync's decode step over buffers that keep their addresses for the whole call, with
no host synchronisation inside the step, run eagerly (any device; `graph` captures the same step).

docs/speed.md ("CUDA graphs: how they are built") describes the buffers and their memory. The rows'
generated keys and values live in a `StaticSuffixCache` written at a step index held on the device
(later slots masked by the shared-prefix attention); finished rows stay as padding, and the sampler
runs outside the step on the live rows only, so each lane's generator draws as on the other paths.
Parts of `rows_per_forward` rows share ONE set of suffix buffers on the card, each part's slots
kept in host memory (`host_memory`) between its steps. Buffers are made once per call.
"""
from __future__ import annotations

from typing import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .. import host_memory
from .. import shared_prefix as sp
from .base import Batch, StepDraws, ForwardPasses
from .one_sync import OneSync


def suffix_bytes(n_layers: int, rows: int, kv_heads: int, slots: int, head_dim: int,
                 bytes_per_value: int) -> int:
    """Bytes of a static suffix cache: keys and values of every layer."""
    return 2 * n_layers * rows * kv_heads * slots * head_dim * bytes_per_value


class StaticSuffixLayer(CacheLayerMixin):
    """One layer's generated keys and values, rows x kv heads x slots x head dim, written in place
    at the call's step index (shared by every layer)."""

    is_compileable = True           # fixed addresses, written in place (as transformers' StaticLayer)

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, step: torch.Tensor, is_sliding: bool):
        super().__init__()
        self.keys, self.values, self.step = keys, values, step
        self.is_sliding = bool(is_sliding)
        self.dtype, self.device = keys.dtype, keys.device
        self.max_cache_len = keys.shape[2]
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:
        """Nothing to do: the buffers were allocated with the layer."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *_args, **_kwargs):
        if key_states.shape[2] != 1:
            raise ValueError(f"a static suffix cache takes one token per pass, got {key_states.shape[2]}")
        self.keys.index_copy_(2, self.step, key_states)
        self.values.index_copy_(2, self.step, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> torch.Tensor:
        """The step index, a tensor on the device (as StaticLayer answers): no host synchronisation."""
        return self.step[0]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(keys the attention sees, their offset): every slot; the ones after the step are masked."""
        return self.max_cache_len, 0

    def get_max_length(self) -> int:
        return self.max_cache_len

    def get_max_cache_shape(self) -> int:     # the name older transformers releases ask for
        return self.max_cache_len

    def reset(self) -> None:
        self.keys.zero_()
        self.values.zero_()
        self.step.zero_()

    def _fixed(self, what: str):
        raise NotImplementedError(f"a static suffix cache keeps its buffers' addresses for the whole call "
                                  f"(a captured CUDA graph reads them there): it cannot {what}")

    def offload(self):
        self._fixed("be offloaded")

    def prefetch(self):
        self._fixed("be offloaded")

    def reorder_cache(self, beam_idx) -> None:
        self._fixed("reorder its rows (finished rows stay in the batch as padding)")

    def crop(self, tokens_to_remove: int) -> None:
        self._fixed("be cropped")

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._fixed("repeat its rows")

    def batch_select_indices(self, indices) -> None:
        self._fixed("drop rows (finished rows stay in the batch as padding)")


class StaticSuffixCache(Cache):
    """A transformers `Cache` of `StaticSuffixLayer`s written in place at `step` (a 1-element index
    on the device): what fixed buffers cannot do is refused by name. Slots start at zero, so a
    masked slot adds exactly nothing."""

    def __init__(self, like, rows: int, slots: int):
        """`like`: a prompt's cache, for each layer's shape, dtype, device and kind."""
        step = torch.zeros(1, dtype=torch.long, device=like.layers[0].keys.device)
        layers = []
        for lay in like.layers:
            _, kv_heads, _, head_dim = lay.keys.shape
            layers.append(StaticSuffixLayer(lay.keys.new_zeros(rows, kv_heads, slots, head_dim),
                                            lay.keys.new_zeros(rows, kv_heads, slots, head_dim), step,
                                            getattr(lay, "is_sliding", False)))
        self._hold(layers, step)

    def _hold(self, layers: list[StaticSuffixLayer], step: torch.Tensor) -> None:
        super().__init__(layers=layers)
        self.step = step
        self.keys = [lay.keys for lay in layers]
        self.values = [lay.values for lay in layers]

    def first_rows(self, n: int) -> "StaticSuffixCache":
        """A cache over views of the first `n` rows, with a step index of its own."""
        out = object.__new__(StaticSuffixCache)
        step = torch.zeros_like(self.step)
        out._hold([StaticSuffixLayer(lay.keys[:n], lay.values[:n], step, lay.is_sliding) for lay in self.layers],
                  step)
        return out

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


class StaticStep:
    """One part's decode step over static views; `run` makes no host synchronisation, no buffer."""

    def __init__(self, backend, tokens: torch.Tensor, positions: torch.Tensor,
                 cache: StaticSuffixCache, groups: Sequence[sp.Group], pool=None):
        self.backend, self.tokens, self.positions = backend, tokens, positions
        self.cache, self.groups, self.pool = cache, list(groups), pool

    @staticmethod
    def memory_pool(device):
        """What the steps of one call's parts share: nothing when run eagerly (graphs: a pool)."""
        return None

    def buffers(self) -> dict[str, torch.Tensor]:
        """Every buffer the step reads or writes in place, by name."""
        out = {"tokens": self.tokens, "positions": self.positions, "step": self.cache.step}
        for i, (k, v) in enumerate(zip(self.cache.keys, self.cache.values)):
            out[f"keys.{i}"], out[f"values.{i}"] = k, v
        return out

    def run(self) -> torch.Tensor:
        """The part's next-token logits (all its rows, finished ones included)."""
        sp.set_groups(self.groups, step=self.cache.step)
        logits = self.backend.forward(self.tokens, self.cache, self.positions).logits[:, -1, :]
        self.cache.step.add_(1)
        self.positions.add_(1)
        return logits


class StaticRows(ForwardPasses):
    """The call's rows in static buffers to the end (see the module's note)."""

    def __init__(self, backend, batch: Batch, step_class: type):
        self.backend, self.batch, self.step_class = backend, batch, step_class
        self.rows = list(batch.live)             # row number at each batch slot, for the whole call
        self.steps: list[StaticStep] | None = None
        self.done = 0                            # steps run: the slot each part writes next

    def _build(self) -> None:
        b, dev, n = self.batch, self.backend.device, len(self.rows)
        self.tokens = torch.zeros(n, 1, dtype=torch.long, device=dev)
        self.positions = torch.tensor(b.first_positions(self.rows), device=dev)[:, None]
        self.live_slots = torch.arange(n, device=dev)
        self.all_live = True
        self.slot_of = {r: i for i, r in enumerate(self.rows)}
        like = b.prefixes[0].cache
        cap = self.backend.rows_per_forward or n
        pool = self.step_class.memory_pool(dev)
        spans = [(a, min(n, a + cap)) for a in range(0, n, cap)]
        self.stores: list[list[torch.Tensor]] | None = None
        if len(spans) > 1 and host_memory.separate(dev):
            shared = StaticSuffixCache(like, cap, b.slots)         # one part's rows, on the card
            caches = [shared.first_rows(e - a) for a, e in spans]
            self.stores = [[host_memory.host_zeros(t.shape[2], t.shape[0], t.shape[1], t.shape[3], like=t)
                            for t in c.keys + c.values] for c in caches]     # slot-major: slots so far, one stretch
        else:
            caches = [StaticSuffixCache(like, e - a, b.slots) for a, e in spans]
        self.steps = [self.step_class(self.backend, self.tokens[a:e], self.positions[a:e], cache,
                                      b.groups(self.rows[a:e]), pool)
                      for (a, e), cache in zip(spans, caches)]

    def _run(self, i: int) -> torch.Tensor:
        """Part i's step; with host stores, its slots so far copied in before it and the new one
        out after it (later slots are masked: what another part left there adds nothing)."""
        step = self.steps[i]
        if self.stores is None:
            return step.run()
        buffers, done = step.cache.keys + step.cache.values, self.done
        for card, host in zip(buffers, self.stores[i]):
            card.permute(2, 0, 1, 3)[:done].copy_(host[:done], non_blocking=True)
        out = step.run()
        for card, host in zip(buffers, self.stores[i]):
            host_memory.to_host(host[done], card[:, :, done])
        return out

    def next_logits(self, drawn: StepDraws, keep: Sequence[int]) -> torch.Tensor:
        if self.steps is None:
            self._build()
        # this step's draws go to the rows that drew them (those live before this step)
        self.tokens[:, 0].index_copy_(0, self.live_slots, drawn.tokens)
        if len(keep) < len(drawn.ids):       # rows finished: a new index of the live rows
            self.live_slots = torch.tensor([self.slot_of[r] for r in self.batch.live], device=self.backend.device)
            self.all_live = False
        outs = [self._run(i) for i in range(len(self.steps))]
        self.done += 1
        logits = outs[0] if len(outs) == 1 else torch.cat(outs)
        return logits if self.all_live else logits.index_select(0, self.live_slots)


class Static(OneSync):
    name = "static"
    step_class = StaticStep

    def passes(self, backend, batch: Batch) -> ForwardPasses:
        return StaticRows(backend, batch, self.step_class)
