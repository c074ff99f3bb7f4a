"""Logit warping for sampling: temperature, then top-k, then top-p, as transformers applies them
(vLLM, the official engine, uses the same definitions). Written out so that the batched sampler
does not depend on `generate`'s internals; a test checks it against transformers' own warpers."""
from __future__ import annotations

import torch


def warp_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                top_p: float = 1.0) -> torch.Tensor:
    """Return batch x vocab logits with excluded tokens set to -inf (input is not modified)."""
    if temperature != 1.0:
        logits = logits / temperature
    if top_k and top_k > 0:
        k = min(int(top_k), logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        # Drop the low-probability tail whose total mass is <= 1 - top_p; the top token stays.
        srt, order = torch.sort(logits, descending=False, dim=-1)
        cum = srt.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1 - top_p)
        drop[..., -1:] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits
