"""A LLaMA-style tokenizer and a tiny LLaMA built locally (nothing downloaded), for tests.

The tokenizer (built by seakr_repro/doubles/llama_tokenizer.py, which says what makes it LLaMA-like)
is re-exported here for the tests.

`scripted(backend, calls)` makes greedy decoding follow given token lists with given
probabilities, so a test decides what the model "says" while every other step is the backend's.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

# one definition, in the package (the card check builds its models' tokenizer with it too)
from seakr_repro.doubles.llama_tokenizer import BOS, EOS, build_tokenizer  # noqa: F401


def build_model(vocab_size: int, max_context: int = 2048, seed: int = 0):
    """A 2-layer LlamaForCausalLM with random weights (float32, CPU)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=max_context, bos_token_id=BOS, eos_token_id=EOS,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def build_backend(tmp_path: Path, max_context: int = 2048, name: str = "tiny-llama"):
    from seakr_repro.llm.hf.backend import HFBackend

    tok = build_tokenizer(tmp_path / "tok")
    return HFBackend(build_model(len(tok), max_context), tok, name, prefix_cache_tokens=0)


class scripted:
    """Context manager: the k-th prompt the backend encodes is answered (greedily) with
    calls[k] = (ids, probs), the last entry repeating: token i with probability probs[i] (the
    rest spread evenly), then EOS, whatever the random weights say."""

    def __init__(self, backend, calls: list[tuple[list[int], list[float] | None]]):
        self.backend, self.calls = backend, [(list(i), p) for i, p in calls]
        self.n_prompt, self.count = 0, 0

    def _encode(self, prompt):
        ids = type(self.backend)._encode(self.backend, prompt)
        self.n_prompt = len(ids)
        self.ids, probs = self.calls[min(self.count, len(self.calls) - 1)]
        self.probs = list(probs) if probs is not None else [0.99] * len(self.ids)
        self.count += 1
        return ids

    def _hook(self, module, args, kwargs, out):
        cache = out.past_key_values
        if kwargs.get("position_ids") is not None:     # shared-prefix decoding: rows cache only
            pos = int(kwargs["position_ids"][0, -1]) + 1   # their own tokens, positions say where
        else:
            pos = cache.get_seq_length() if cache is not None else kwargs["input_ids"].shape[1]
        step = pos - self.n_prompt              # index of the token this output predicts
        if step < 0 or not self.count:
            return out
        tok, p = (self.ids[step], self.probs[step]) if step < len(self.ids) else (EOS, 0.99)
        vocab = out.logits.shape[-1]
        logits = torch.full_like(out.logits, math.log((1 - p) / (vocab - 1)))
        logits[..., tok] = math.log(p)
        out.logits = logits
        return out

    def __enter__(self):
        self.backend._encode = self._encode
        self.handle = self.backend.model.register_forward_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        del self.backend._encode


def continuation_ids(tok, prompt: str, text: str) -> list[int]:
    """The ids of `text` as they follow `prompt` (the tokenizer's own split of prompt + text)."""
    whole = tok(prompt + text)["input_ids"]
    head = tok(prompt)["input_ids"]
    assert whole[:len(head)] == head, "the prompt's tokens change when the text follows"
    return whole[len(head):]
