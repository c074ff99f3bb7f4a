"""What the transformers backend keeps of the prompts it pre-filled: KV caches at chunk boundaries.

Prompts are pre-filled in chunks of PREFILL_CHUNK tokens; the cache at each boundary is kept (LRU,
bounded in tokens) under the ids before it, so calls that share few-shot demonstrations pre-fill
only their own tail (docs/speed.md, "prefix reuse"), and a whole prompt seen before costs no pass.
A chunk is computed alike whether cached or not, so results never depend on earlier calls. Kept
caches are copied out, never handed out: decoding grows what it gets.
"""
from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from typing import Callable, Sequence

import numpy as np
import torch

PREFILL_CHUNK = 128          # tokens per pre-fill chunk (the unit of prefix reuse)


def _ids_key(ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def repeat_cache(cache, n: int):
    """A copy of a batch-1 KV cache with n identical rows (the original stays untouched)."""
    out = copy.deepcopy(cache)
    if n > 1:
        out.batch_repeat_interleave(n)
    return out


class PrefixCache:
    """At most `max_tokens` tokens of kept caches (0: none); `hits` counts the pre-fills that reused one."""

    def __init__(self, max_tokens: int):
        self.max_tokens = int(max_tokens)
        self._kept: "OrderedDict[bytes, tuple]" = OrderedDict()
        self.hits = 0

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)

    def _get(self, key: bytes):
        hit = self._kept.get(key)
        if hit is not None:
            self._kept.move_to_end(key)
            self.hits += 1
        return hit

    @torch.inference_mode()
    def prefill(self, prompt_ids: Sequence[int], forward: Callable, device) -> tuple:
        """(KV cache, next-token logits) of a prompt; `forward(ids, cache)` runs one model pass."""
        ids = list(prompt_ids)
        whole = self._get(_ids_key(ids) + b"=")
        if whole is not None:
            return copy.deepcopy(whole[1]), whole[2].clone()
        last_boundary = (len(ids) - 1) // PREFILL_CHUNK * PREFILL_CHUNK   # >= 1 token stays for the tail
        cache, start = None, 0
        for b in range(last_boundary, 0, -PREFILL_CHUNK):
            hit = self._get(_ids_key(ids[:b]))
            if hit is not None:
                cache, start = copy.deepcopy(hit[1]), b
                break
        for b in range(start, last_boundary, PREFILL_CHUNK):
            chunk = torch.tensor([ids[b:b + PREFILL_CHUNK]], device=device)
            cache = forward(chunk, cache).past_key_values
            self.remember(ids[:b + PREFILL_CHUNK], cache)
        out = forward(torch.tensor([ids[last_boundary:]], device=device), cache)
        self.remember(ids, out.past_key_values, out.logits[:, -1, :])
        return out.past_key_values, out.logits[:, -1, :]

    def remember(self, ids: Sequence[int], cache, logits=None) -> None:
        """Keep a chunk boundary's cache, or (with its logits) a whole prompt's."""
        if self.max_tokens <= 0:
            return
        if logits is None:
            self._kept[_ids_key(ids)] = (len(ids), copy.deepcopy(cache))
        else:
            self._kept[_ids_key(ids) + b"="] = (len(ids), copy.deepcopy(cache), logits.clone())
        while sum(v[0] for v in self._kept.values()) > self.max_tokens and len(self._kept) > 1:
            self._kept.popitem(last=False)
