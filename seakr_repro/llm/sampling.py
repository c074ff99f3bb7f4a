"""Logit warping: temperature, then top-k, then top-p, as transformers and vLLM apply them (a test
checks it against transformers' warpers), and the per-token statistics of a raw distribution
(`token_stats`) for both backends. Imports torch only: the vLLM worker imports it in vLLM's process."""
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


def sample_tokens(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                  generator: torch.Generator | None = None,
                  rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, their warped log-probs), one draw per row; temperature <= 0 is greedy with the
    raw log-prob, as the engine reports it. `rows` (the out-of-memory retry's rows per pass): warp
    that many rows at a time; ONE draw over all rows keeps the generator's order, so the same tokens."""
    logits = logits.float()
    if rows is not None and rows < logits.shape[0]:
        return _sample_in_chunks(logits, temperature, top_k, top_p, generator, rows)
    if temperature <= 0:
        ids = logits.argmax(-1)
        logp = torch.log_softmax(logits, dim=-1)
    else:
        warped = warp_logits(logits, temperature, top_k, top_p)
        logp = torch.log_softmax(warped, dim=-1)
        ids = torch.multinomial(torch.softmax(warped, dim=-1), 1, generator=generator)[:, 0]
    return ids, logp.gather(1, ids[:, None])[:, 0]


def _sample_in_chunks(logits, temperature, top_k, top_p, generator, rows):
    chunks = [slice(a, a + rows) for a in range(0, logits.shape[0], rows)]

    def scaled(c):
        return logits[c] if temperature <= 0 else warp_logits(logits[c], temperature, top_k, top_p)
    if temperature <= 0:
        ids = logits.argmax(-1)
    else:
        probs = torch.empty_like(logits)
        for c in chunks:
            probs[c] = torch.softmax(scaled(c), dim=-1)
        ids = torch.multinomial(probs, 1, generator=generator)[:, 0]
        del probs
    # the warping again, chunk by chunk, for the drawn tokens' log-probs (kept whole, it would
    # hold all rows' numbers at once)
    return ids, torch.cat([torch.log_softmax(scaled(c), dim=-1).gather(1, ids[c, None])[:, 0] for c in chunks])


def warped_logsumexp(logits: torch.Tensor, temperature: float, top_k: int,
                     top_p: float) -> torch.Tensor:
    """logsumexp of the warped logits: a kept token's warped log-prob is l / temperature - this."""
    return torch.logsumexp(warp_logits(logits.float(), temperature, top_k, top_p), dim=-1)


def token_stats(logits: torch.Tensor, stats: bool = True):
    """(log_softmax, entropy with 0 * log 0 = 0, logsumexp of the logits: the energy) of float
    `logits` (... x vocab); the last two None when `stats` is False."""
    logp = torch.log_softmax(logits, dim=-1)
    if not stats:
        return logp, None, None
    entropy = -(logp.exp() * logp).nan_to_num().sum(-1)
    return logp, entropy, torch.logsumexp(logits, dim=-1)
