"""A content-addressed on-disk cache of LLM calls, and a backend wrapper that uses it.

Key = sha256 of (model name, weights fingerprint, call kind, prompt, every parameter, seed), so a
changed prompt, setting or checkpoint can never return a stale answer. Values live under
CACHE_DIR/llm/<model>/<key[:2]>/<key>.json (+ <key>.npy for vectors), written atomically: the
vectors first, then the JSON, whose presence marks a complete entry. Python floats round-trip
exactly through JSON and float32 arrays through .npy, so a hit equals the original call.

`CachedBackend` also counts calls, hits, misses and tokens: the runner reports them per question.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import io, paths
from .base import Generation, SampleSet

CACHE_FORMAT = 2   # bump when the stored layout or the meaning of a stored field changes


def call_key(model: str, fingerprint: str, kind: str, prompt: str, params: dict) -> str:
    blob = json.dumps({"format": CACHE_FORMAT, "model": model, "fingerprint": fingerprint,
                       "kind": kind, "prompt": prompt, "params": params},
                      sort_keys=True, ensure_ascii=False, default=list)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LLMCache:
    """Store and fetch Generation / SampleSet values by key."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _base(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> Generation | SampleSet | None:
        base = self._base(key)
        meta_path = base.with_suffix(".json")
        if not meta_path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if meta["type"] == "generation":
                return Generation(**meta["value"])
            vectors = np.load(base.with_suffix(".npy"), allow_pickle=False)
            return SampleSet(samples=[Generation(**g) for g in meta["samples"]], vectors=vectors,
                             layer=meta["layer"], hook=meta["hook"])
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            return None   # unreadable entry (e.g. written by an older layout): recompute it

    def put(self, key: str, value: Generation | SampleSet) -> None:
        base = self._base(key)
        if isinstance(value, SampleSet):
            # through a file handle: np.save would append ".npy" to the temporary name
            with io.atomic_open(base.with_suffix(".npy"), "wb") as fh:
                np.save(fh, np.asarray(value.vectors, dtype=np.float32), allow_pickle=False)
            meta = {"type": "sampleset", "layer": value.layer, "hook": value.hook,
                    "samples": [dataclasses.asdict(g) for g in value.samples]}
        else:
            meta = {"type": "generation", "value": dataclasses.asdict(value)}
        io.write_json(base.with_suffix(".json"), meta, indent=None)


COUNTS = ("llm_calls", "cache_hits", "cache_misses", "prompt_tokens", "generated_tokens")


class CallCounter:
    """The calls of one scope (a question), made by any thread working for it."""

    def __init__(self):
        self._lock = threading.Lock()
        self.values = dict.fromkeys(COUNTS, 0)

    def add(self, **counts: int) -> None:
        with self._lock:
            for k, v in counts.items():
                self.values[k] += v


_SCOPE: contextvars.ContextVar[CallCounter | None] = contextvars.ContextVar("seakr_llm_scope",
                                                                             default=None)


@contextlib.contextmanager
def counting():
    """Count every CachedBackend call made in this context (and threads started from a copy of
    it) in a fresh CallCounter: per-question costs stay right when questions run concurrently."""
    counter = CallCounter()
    token = _SCOPE.set(counter)
    try:
        yield counter
    finally:
        _SCOPE.reset(token)


class CachedBackend:
    """Wrap any backend with the same protocol; `enabled=False` passes every call through."""

    def __init__(self, backend, root: str | Path | None = None, enabled: bool = True):
        self.backend = backend
        self.name = backend.name
        self.n_layers = backend.n_layers
        self.hidden_size = backend.hidden_size
        self.eos_token_id = backend.eos_token_id
        self.fingerprint = getattr(backend, "fingerprint", backend.name)
        self.cache = LLMCache(Path(root) if root else paths.CACHE_DIR / "llm" / backend.name)
        self.enabled = enabled
        self.reset_stats()

    scoped_counts = True   # the runner may count per question with `counting()`

    def reset_stats(self) -> None:
        self._lock = threading.Lock()
        self.calls = self.hits = self.misses = 0
        self.prompt_tokens = self.generated_tokens = 0

    def _add(self, calls=0, hits=0, misses=0, prompt_tokens=0, generated_tokens=0) -> None:
        with self._lock:
            self.calls += calls
            self.hits += hits
            self.misses += misses
            self.prompt_tokens += prompt_tokens
            self.generated_tokens += generated_tokens
        scope = _SCOPE.get()
        if scope is not None:
            scope.add(llm_calls=calls, cache_hits=hits, cache_misses=misses,
                      prompt_tokens=prompt_tokens, generated_tokens=generated_tokens)

    def stats(self) -> dict[str, int]:
        return {"llm_calls": self.calls, "cache_hits": self.hits, "cache_misses": self.misses,
                "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens}

    def __getattr__(self, attr: str) -> Any:   # anything else (tokenizer, model, ...) passes through
        if "backend" not in self.__dict__:      # during copy/unpickling: no recursion
            raise AttributeError(attr)
        return getattr(self.__dict__["backend"], attr)

    # --------------------------------------------------------------------------------
    def _count(self, value, hit: bool) -> None:
        gens = value.samples if isinstance(value, SampleSet) else [value]
        self._add(calls=1, hits=int(hit), misses=int(not hit),
                  prompt_tokens=gens[0].n_prompt_tokens if gens else 0,
                  generated_tokens=sum(len(g.token_ids) for g in gens))

    def _cached(self, kind: str, prompt: str, params: dict, compute):
        key = call_key(self.name, self.fingerprint, kind, prompt, params)
        value = self.cache.get(key) if self.enabled else None
        hit = value is not None
        if not hit:
            value = compute()
            if self.enabled:
                self.cache.put(key, value)
        self._count(value, hit)
        return value

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        params = dict(max_new_tokens=max_new_tokens, stop=list(stop), want_stats=want_stats,
                      want_attention=want_attention)
        return self._cached("generate", prompt, params,
                            lambda: self.backend.generate(prompt, **{**params, "stop": tuple(stop)}))

    def sample(self, prompt: str, **kwargs) -> SampleSet:
        params = self._sample_params(kwargs)
        return self._cached("sample", prompt, params, lambda: self.backend.sample(prompt, **kwargs))

    def sample_many(self, prompts: Sequence[str], **kwargs) -> list[SampleSet]:
        """Cached contexts come from disk; the others go to the backend in ONE call, so a
        batching backend (vLLM) decodes them together."""
        params = self._sample_params(kwargs)
        keys = [call_key(self.name, self.fingerprint, "sample", p, params) for p in prompts]
        values = [self.cache.get(k) if self.enabled else None for k in keys]
        todo = [i for i, v in enumerate(values) if v is None]
        if todo:
            for i, v in zip(todo, self.backend.sample_many([prompts[i] for i in todo], **kwargs)):
                values[i] = v
                if self.enabled:
                    self.cache.put(keys[i], v)
        for i, v in enumerate(values):
            self._count(v, hit=i not in todo)
        return values

    def score(self, prompt: str, continuation: str) -> Generation:
        return self._cached("score", prompt, {"continuation": continuation},
                            lambda: self.backend.score(prompt, continuation))

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def _sample_params(self, kwargs: dict) -> dict:
        # Fill in the protocol's defaults so that sample(p, k=20) and sample(p, k=20, seed=42)
        # share one entry; the layer is resolved because None means "middle".
        from .registry import middle_layer
        p = dict(stop=(), temperature=1.0, top_k=50, top_p=0.9, seed=42, layer=None,
                 hook="mlp_out", want_stats=False, forced_eos="append")
        p.update(kwargs)
        p["stop"] = list(p["stop"])
        if p["layer"] is None:
            p["layer"] = middle_layer(self.n_layers)
        return p
