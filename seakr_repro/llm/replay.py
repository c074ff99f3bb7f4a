"""A real model's earlier calls, replayed: `cost`'s dry run answers each call from the entry a run
of the real model left in the call cache `REPLAY_ENV` names, and only the other calls from the
synthetic model, with the real model's tokenizer. So where an earlier run made the same calls, the
dry run follows the real model's decisions (SeaKR's steps, retrievals, answers); `replay_counts`
says how many calls each answered. Nothing is written to the replayed cache.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .attention import WordsMixin
from .base import layers
from .cache import CachedBackend, has_stats, map_generations
from .synthetic import SyntheticBackend
from .tokenizing import TokenizerMixin

REPLAY_ENV = "SEAKR_REPLAY_CACHE"
_LAYERS: list = []            # this process's replayed caches (`replay_counts` sums them)


class TokenizedSynthetic(WordsMixin, TokenizerMixin, SyntheticBackend):
    """The synthetic model under a real model's name, fingerprint and tokenizer. Step 02's vectors
    at a replayed sample's layer and hook are the sample's (`replayed`), so that step 03's
    thresholds are the real model's."""

    def __init__(self, name: str, fingerprint: str, tokenizer, n_layers: int, hidden_size: int,
                 eos_token_id: int, max_context: int | None, generation_config: dict):
        super().__init__(name, n_layers, hidden_size)
        self.tokenizer, self.fingerprint, self.eos_token_id = tokenizer, fingerprint, eos_token_id
        self.max_context, self.generation_config = max_context, generation_config
        self.replayed: dict[str, object] = {}        # prompt -> its latest replayed SampleSet

    def eos_vectors_all_layers(self, prompt: str, completions) -> dict:
        out = super().eos_vectors_all_layers(prompt, completions)
        got = self.replayed.get(prompt)
        if got is not None and len(got.vectors) == len(completions):
            out[got.hook][got.layer] = got.vectors
        return out


class ReplayedCache(CachedBackend):
    """A read-only call cache of the real model's entries; its samples are kept for the model behind
    it. An entry without statistics answers a call that asks for them with the synthetic model's
    (its tokens, and so the decisions, stay the real model's)."""

    def _lookup(self, kind: str, prompt: str, params: dict, want_stats: bool):
        value = super()._lookup(kind, prompt, params, False)
        if value is not None and want_stats and not has_stats(value):
            value = _with_stand_in_stats(value, prompt)
        if kind == "sample" and value is not None:
            if len(self.backend.replayed) > 10_000:       # bounded: only the question at hand matters
                self.backend.replayed.clear()
            self.backend.replayed[prompt] = value
        return value

    def _generation(self, rng, prompt, text, stop, max_new_tokens, want_stats, want_attention):
        gen = super()._generation(rng, prompt, text, stop, max_new_tokens, want_stats, want_attention)
        gen.n_prompt_tokens = self.count_tokens(prompt)       # the prompt as the real model reads it
        return gen


def _with_stand_in_stats(value, prompt: str):
    """`value` (a Generation or SampleSet) with the synthetic model's statistics."""
    import dataclasses

    from .synthetic import stand_in_stats

    def one(g):
        entropies, logsumexp = stand_in_stats(prompt, g.text, len(g.token_ids))
        return dataclasses.replace(g, entropies=entropies, logsumexp=logsumexp)
    return map_generations(value, one)


def replay_cache() -> Path | None:
    """The call cache this process replays (`REPLAY_ENV`), or None."""
    given = os.environ.get(REPLAY_ENV)
    return Path(given) if given else None


def replaying(name: str, path: Path, cfg: Any, dtype: str | None, device: str | None, cache_dir: Path):
    """A read-only `CachedBackend` over model `name`'s entries in `cache_dir` (its weights at
    `path` give the fingerprint, tokenizer and shapes), in front of a `TokenizedSynthetic`."""
    from transformers import AutoConfig, AutoTokenizer

    from ..core.device import resolve_device
    from .model_info import generation_config_of, model_dims, resolve_dtype, text_config, weights_fingerprint

    get = (lambda key, default: cfg.get(key, default)) if cfg is not None else (lambda k, d: d)
    tok = AutoTokenizer.from_pretrained(path)
    config = AutoConfig.from_pretrained(path)
    n_layers, hidden, eos = model_dims(config, tok)
    n_ctx = getattr(text_config(config), "max_position_embeddings", None)
    fingerprint = weights_fingerprint(path, resolve_dtype(dtype or get("model.dtype", "float32")),
                                      resolve_device(device or get("model.device", "auto")))
    model = TokenizedSynthetic(name, fingerprint, tok, n_layers, hidden, eos, int(n_ctx) if n_ctx else None,
                               generation_config_of(path))
    layer = ReplayedCache(model, root=cache_dir / "llm" / name, vectors=get("cache.vectors", "gram"),
                          read_only=True)
    _LAYERS.append(layer)
    return layer


def adapted(base, tag: str):
    """The replay layer of a model derived from `base`'s (KBAE's: `tag` "kbae"): the newest
    `<name>+<tag>-<hash>` folder, keyed `<fingerprint>+<tag>-<hash>`; None where there is none."""
    layer = next((b for b in layers(base) if isinstance(b, ReplayedCache)), None)
    if layer is None:
        return None
    model = layer.backend
    found = sorted(layer.cache.root.parent.glob(f"{model.name}+{tag}-*"), key=lambda p: p.stat().st_mtime)
    if not found:
        return None
    suffix = found[-1].name[len(model.name):]
    copy = TokenizedSynthetic(found[-1].name, model.fingerprint + suffix, model.tokenizer, model.n_layers,
                              model.hidden_size, model.eos_token_id, model.max_context, model.generation_config)
    out = ReplayedCache(copy, root=found[-1], vectors=layer.cache.vectors, read_only=True)
    _LAYERS.append(out)
    return out


def replay_counts() -> dict[str, int]:
    """{"replayed": calls the real model's entries answered, "synthetic": calls the synthetic
    model computed}, in this process."""
    return {"replayed": sum(layer.hits for layer in _LAYERS),
            "synthetic": sum(layer.misses for layer in _LAYERS)}
