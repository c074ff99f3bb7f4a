"""Attention of many rows over ONE copy of their prompt's keys and values.

Why and what it saves: docs/speed.md ("shared-prefix decoding"). Each row keeps only its own
suffix (the tokens generated after the prompt) in an ordinary transformers cache; an attention
function registered with transformers' `AttentionInterface` attends to the prefix (batch 1,
broadcast to its group's rows, never copied) and the row's own suffix (causal) with one softmax
over both, so the result equals attention over "prefix + suffix". Positions (RoPE) are passed
explicitly; rows are grouped contiguously by prompt; the running pass's plan lives in a
thread-local set by `use_prefixes`.

`fused` (`decode="fused"`): a decode step runs each part as ONE fused kernel that also returns its
log-sum-exp (`_attend`), merged as above; results equal the unfused path's within float rounding.
`static` and `graph`: each row's suffix lives in preallocated slots written at a step index held on
the device (`set_groups(..., step=)`), later slots masked, no host reads (capturable).

Supported (`unsupported_reason`): plain causal softmax attention with RoPE, i.e. LLaMA-family
models and Gemma-3, whose sliding-window layers are masked as transformers masks them (a query at
q sees keys after q - window; such a layer's prompt cache keeps only the prompt's last window - 1
keys, so prefix positions count back from the prompt's length). Other models with sliding windows
or logit soft-capping take the reference path; the backend says so.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch

from ..model_info import text_config

NAME = "seakr_shared_prefix"
SUPPORTED_TYPES = ("llama", "gemma3_text")   # plain causal attention, RoPE from position_ids
SLIDING_TYPES = ("gemma3_text",)   # sliding-window layers that pass `sliding_window` to us

_STATE = threading.local()


@dataclass
class Group:
    """Rows [start, end) of the batch attend to `prefix` (a batch-1 transformers cache)."""

    start: int
    end: int
    prefix: object


def prefix_kv(cache, layer: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Keys, values (1 x kv_heads x n x head_dim; a sliding layer: its last n) and prompt length."""
    lay = cache.layers[layer]
    return lay.keys, lay.values, int(lay.get_seq_length())


def unsupported_reason(config) -> str | None:
    """None if shared-prefix attention is exact for this model, else the reason it is not."""
    cfg = text_config(config)
    kind = getattr(cfg, "model_type", "?")
    if kind not in SLIDING_TYPES and (getattr(cfg, "sliding_window", None) or getattr(
            cfg, "layer_types", None) and any(t != "full_attention" for t in cfg.layer_types)):
        return "the model has sliding-window attention layers"
    if kind not in SUPPORTED_TYPES:
        return f"model type '{kind}' is not one of {', '.join(SUPPORTED_TYPES)}"
    for key in ("attn_logit_softcapping", "attention_bias_softcap"):
        if getattr(cfg, key, None):
            return f"the model uses {key}"
    return None


@contextlib.contextmanager
def use_prefixes(model, groups: Sequence[Group] = (), fused: bool = False) -> Iterator[None]:
    """Run forward passes of `model` with shared-prefix attention for these row groups (or for
    those given later by `set_groups`, before each pass); `fused`: decode steps use `_attend`."""
    register()
    before = model.config._attn_implementation
    _STATE.groups = list(groups)
    _STATE.fused = bool(fused)
    _STATE.step = None
    if before != NAME:
        model.set_attn_implementation(NAME)
    try:
        yield
    finally:
        _STATE.groups = None
        _STATE.fused = False
        _STATE.step = None
        if before != NAME:
            model.set_attn_implementation(before)


def set_groups(groups: Sequence[Group], step: torch.Tensor | None = None) -> None:
    """The row groups of the next forward passes (inside `use_prefixes`). `step` (static suffix
    slots): a 1-element index on the device of the slot the pass writes; later slots are masked."""
    _STATE.groups = list(groups)
    _STATE.step = step


def shared_prefix_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                            scaling: float | None = None, sliding_window: int | None = None,
                            **_kwargs):
    """query: B x H x s x D (the new tokens); key/value: B x Hkv x S x D (each row's suffix,
    the new tokens last). Returns B x s x H x D as transformers' attention functions do.
    `sliding_window` (a sliding layer's window): keys at or before q - window are hidden."""
    groups = getattr(_STATE, "groups", None)
    if not groups:
        raise RuntimeError("shared-prefix attention called outside use_prefixes()")
    b, h, s, d = query.shape
    hkv, n_suf = key.shape[1], key.shape[2]
    rep = h // hkv
    scale = d ** -0.5 if scaling is None else scaling
    dt = query.dtype
    # Query heads grouped by the kv head they read (GQA without copying keys or values).
    q5 = query.view(b, hkv, rep, s, d)
    static = getattr(_STATE, "step", None)     # static suffix slots: the written ones end here
    if s == 1 and not sliding_window and getattr(_STATE, "fused", False) and static is None:
        return _fused_decode(module, q5, key, value, groups, scale)
    qpos = torch.arange(n_suf - s, n_suf, device=query.device) if static is None else static
    hidden = torch.arange(n_suf, device=query.device)[None, :] > qpos[:, None]   # s x S: future
    if sliding_window:                # own keys that left the window (generations past it)
        hidden |= torch.arange(n_suf, device=query.device)[None, :] <= qpos[:, None] - sliding_window
    out = torch.empty(b, hkv, rep, s, d, dtype=dt, device=query.device)
    for g in groups:
        pk, pv, n_prompt = prefix_kv(g.prefix, module.layer_idx)   # 1 x hkv x P x d
        n = g.end - g.start
        m_rows = n * rep * s
        # Layout (kv head, row, head, position): the prefix is then ONE matrix per kv head for
        # every row and position of the group, and all large tensors stay contiguous.
        qg = q5[g.start:g.end].transpose(0, 1).reshape(hkv, m_rows, d)
        sc_p = torch.matmul(qg, pk[0].transpose(-1, -2)).float().mul_(scale)     # hkv x M x P
        if sliding_window:
            # positions: the kept prefix keys end at the prompt's length; queries follow it
            kpos = n_prompt - pk.shape[-2] + torch.arange(pk.shape[-2], device=query.device)
            gone = kpos[None, :] <= (n_prompt + qpos)[:, None] - sliding_window      # s x P
            if static is not None or bool(gone.any()):    # (static: never read on the host)
                sc_p.view(hkv, n * rep, s, -1).masked_fill_(gone, float("-inf"))
        kg = key[g.start:g.end].unsqueeze(2).transpose(-1, -2)                    # n,hkv,1,d,S
        ss = torch.matmul(q5[g.start:g.end], kg).float() * scale                 # n,hkv,rep,s,S
        if s > 1 or sliding_window or static is not None:
            ss = ss.masked_fill(hidden, float("-inf"))        # causal among the row's own tokens
        ss = ss.transpose(0, 1).reshape(hkv, m_rows, n_suf)
        mx = torch.maximum(sc_p.amax(-1, keepdim=True), ss.amax(-1, keepdim=True))
        # in place: the prefix scores are the largest transient (rows x positions x prompt)
        e_p, e_s = sc_p.sub_(mx).exp_(), (ss - mx).exp_()
        denom = e_p.sum(-1, keepdim=True) + e_s.sum(-1, keepdim=True)
        o_p = torch.matmul(e_p.to(dt), pv[0]).float()                            # hkv x M x d
        vg = value[g.start:g.end].transpose(0, 1)                                 # hkv,n,S,d
        o_s = torch.matmul(e_s.view(hkv, n, rep * s, n_suf).to(dt), vg).float()
        o = (o_p + o_s.view(hkv, m_rows, d)).div_(denom)
        out[g.start:g.end] = o.view(hkv, n, rep, s, d).transpose(0, 1).to(dt)
    return out.view(b, h, s, d).transpose(1, 2).contiguous(), None


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float):
    """(softmax(q k^T * scale) v, float32 logsumexp of the scores) in one fused kernel, no mask.
    torch's public scaled_dot_product_attention does not return the log-sum-exp the merge needs,
    so its kernels are called directly (on CUDA float32: the memory-efficient one; flash has none)."""
    if q.device.type == "cpu":
        o, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False,
                                                                                   scale=scale)
    elif q.dtype in (torch.float16, torch.bfloat16):
        o, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False,
                                                                           scale=scale)[:2]
    else:
        o, logsumexp = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0,
                                                                               False, scale=scale)[:2]
    return o, logsumexp[..., : q.shape[-2]]      # the efficient kernel pads it to a multiple of 32


def _fused_decode(module, q5, key, value, groups, scale):
    """A decode step of `shared_prefix_attention` with `_attend`: ONE batch-1 call over the prefix
    for the group's rows and heads, a batched one over each row's own keys, merged by log-sum-exp:
    out = o_s + (o_p - o_s) * w_p, with the prefix's share w_p = sigmoid(logsumexp_p - logsumexp_s)."""
    b, hkv, rep, _, d = q5.shape
    out = torch.empty(b, hkv, rep, d, dtype=q5.dtype, device=q5.device)
    for g in groups:
        pk, pv, _ = prefix_kv(g.prefix, module.layer_idx)                # 1 x hkv x P x d
        n = g.end - g.start
        q = q5[g.start:g.end, :, :, 0]                                     # n x hkv x rep x d
        o_p, l_p = _attend(q.transpose(0, 1).reshape(1, hkv, n * rep, d), pk, pv, scale)
        o_s, l_s = _attend(q, key[g.start:g.end], value[g.start:g.end], scale)
        o_p = o_p.view(hkv, n, rep, d).transpose(0, 1)
        w_p = torch.sigmoid(l_p.view(hkv, n, rep).transpose(0, 1) - l_s)[..., None]
        o_s = o_s.float()
        out[g.start:g.end] = o_s.add_(o_p.float().sub_(o_s).mul_(w_p))
    return out.view(b, hkv * rep, 1, d).transpose(1, 2).contiguous(), None


_REGISTERED = False


def register() -> None:
    """Make NAME a valid attention implementation (idempotent)."""
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface
        AttentionInterface.register(NAME, shared_prefix_attention)
        _REGISTERED = True
