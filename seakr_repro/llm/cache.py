"""A content-addressed on-disk cache of LLM calls, and a backend wrapper that uses it.

Key = sha256 of (model, weights fingerprint, call kind, prompt, every parameter, seed): a changed
prompt, setting or checkpoint never returns a stale answer. Each value is one .npz file under
CACHE_DIR/llm/<model>/, written once and atomically: the generations as zlib-compressed JSON
(floats round-trip exactly) and a sample call's k forced-EOS vectors as `cache.vectors` says
(docs/disk-and-memory.md, "Call cache"): "gram" stores F with Z J_d Z^T = F F^T and a hit returns
F E^T (E a fixed Helmert basis: the same U up to rounding, NOT the hidden states; `vectors_form`
"gram"), "float16" the vectors. Statistics (`want_stats`) are in the key only on another engine
(vLLM); where nearly free every computed call takes them, so SeaKR and its energy row share calls.
Entries of the two earlier key formats are still found (`_keys`). On a full disk `CachedBackend`
says so once and stores no more, unless `cache.must_keep` (then the run stops: `core.disk_full`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import hashlib
import json
import textwrap
import threading
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core import io, paths
from ..core.disk_full import DiskFullError
from .base import Generation, SampleSet, generate_many, per_prompt
from .base import generate_and_sample_many as base_generate_and_sample_many
from .sampling_settings import Sampling

CACHE_FORMAT = 2   # bump when the stored layout or the meaning of a stored field changes


def call_key(model: str, fingerprint: str, kind: str, prompt: str, params: dict) -> str:
    blob = json.dumps({"format": CACHE_FORMAT, "model": model, "fingerprint": fingerprint,
                       "kind": kind, "prompt": prompt, "params": params},
                      sort_keys=True, ensure_ascii=False, default=list)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


VECTOR_FORMS = ("gram", "float16")


@lru_cache(maxsize=8)
def helmert_basis(d: int, m: int) -> np.ndarray:
    """The first m Helmert contrasts: d x m orthonormal columns orthogonal to the all-ones vector."""
    e = np.zeros((d, m))
    for j in range(m):
        e[: j + 1, j] = 1.0
        e[j + 1, j] = -(j + 1)
        e[:, j] /= np.sqrt((j + 1) * (j + 2))
    return e


def gram_factor(vectors: np.ndarray) -> np.ndarray:
    """F (k x min(k, d)) with F F^T = Z J_d Z^T, from a float64 QR of the row-centred vectors."""
    z = np.asarray(vectors, dtype=np.float64)
    if z.shape[0] == 0:
        return np.zeros((0, 0))
    zc = z - z.mean(axis=1, keepdims=True)
    r = np.linalg.qr(zc.T, mode="r")            # zc^T = Q R  ->  zc zc^T = R^T R
    return np.ascontiguousarray(r.T)


def from_gram_factor(factor: np.ndarray, d: int) -> np.ndarray:
    """k x d float32 vectors whose row-centred Gram matrix is F F^T (rows already centred)."""
    k, m = factor.shape
    if k == 0:
        return np.zeros((0, d), dtype=np.float32)
    return (factor @ helmert_basis(d, m).T).astype(np.float32)


class LLMCache:
    """Store and fetch Generation / SampleSet values by key, one .npz file per value."""

    def __init__(self, root: str | Path, vectors: str = "gram"):
        if vectors not in VECTOR_FORMS:
            from ..core.errors import UserError
            raise UserError(f"unknown cache.vectors form {vectors!r}", setting="cache.vectors",
                            fix=f"use one of {', '.join(VECTOR_FORMS)}")
        self.root, self.vectors = Path(root), vectors

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npz"

    def get(self, key: str) -> Generation | SampleSet | list | None:
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(zlib.decompress(z["meta"].tobytes()).decode("utf-8"))
                if meta["type"] == "generation":
                    return Generation(**meta["value"])
                if meta["type"] == "rows":           # attention rows (DRAGIN)
                    return meta["value"]
                arr = z["vectors"]
            if meta["form"] == "gram":
                vectors = from_gram_factor(arr, meta["d"])
            else:
                vectors = arr.astype(np.float32)
            value = SampleSet(samples=[Generation(**g) for g in meta["samples"]], vectors=vectors,
                              layer=meta["layer"], hook=meta["hook"])
            value.vectors_form = meta["form"]
            return value
        except (OSError, EOFError, ValueError, KeyError, TypeError, zlib.error, zipfile.BadZipFile):
            return None   # unreadable entry (e.g. a torn file): recompute it

    def put(self, key: str, value: Generation | SampleSet | list) -> None:
        arrays = {}
        if isinstance(value, list):                  # attention rows
            meta = {"type": "rows", "value": value}
        elif isinstance(value, SampleSet):
            vec = np.asarray(value.vectors)
            k, d = vec.shape
            form = "gram" if self.vectors == "gram" and k < d else "float16"   # k < d: F fits
            arrays["vectors"] = gram_factor(vec) if form == "gram" else vec.astype(np.float16)
            meta = {"type": "sampleset", "layer": value.layer, "hook": value.hook, "form": form,
                    "d": int(d), "samples": [dataclasses.asdict(g) for g in value.samples]}
        else:
            meta = {"type": "generation", "value": dataclasses.asdict(value)}
        blob = zlib.compress(json.dumps(meta, ensure_ascii=False, separators=(",", ":"),
                                        default=io.json_default).encode("utf-8"), 6)
        arrays["meta"] = np.frombuffer(blob, dtype=np.uint8)
        # through a file handle: np.savez would append ".npz" to the temporary name
        with io.atomic_open(self.path(key), "wb") as fh:
            np.savez(fh, **arrays)


COUNTS = ("llm_calls", "cache_hits", "cache_misses", "prompt_tokens", "generated_tokens",
          "computed_prompt_tokens", "computed_generated_tokens")
# A question's counts as its row in a step's file names them (runner.answer_row and the steps
# that count their calls per question): row field -> counter
ROW_FIELDS = {"llm_calls": "llm_calls", "llm_cache_hits": "cache_hits", "prompt_tokens": "prompt_tokens",
              "tokens": "generated_tokens", "computed_prompt_tokens": "computed_prompt_tokens",
              "computed_tokens": "computed_generated_tokens"}


def row_counts(values: dict) -> dict[str, int]:
    """A `CallCounter`'s (or `stats()`') values under their row names (`ROW_FIELDS`)."""
    return {field: int(values.get(counter, 0)) for field, counter in ROW_FIELDS.items()}


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
    """Count the CachedBackend calls of this context (and of threads started from a copy of it)
    in a fresh CallCounter, so that questions run side by side each count their own."""
    counter = CallCounter()
    token = _SCOPE.set(counter)
    try:
        yield counter
    finally:
        _SCOPE.reset(token)


def with_call_counts(backend, compute):
    """(compute(), `row_counts` of its calls on `backend`, or None without a call cache)."""
    if not getattr(backend, "scoped_counts", False):
        return compute(), None
    with counting() as counter:
        value = compute()
    return value, row_counts(counter.values)


def _generate_params(max_new_tokens: int, stop: Sequence[str], want_attention: bool = False) -> dict:
    """A `generate` call's key parameters, for every path that stores one (no statistics)."""
    return dict(max_new_tokens=max_new_tokens, stop=list(stop), want_attention=want_attention)


def _generations(value) -> list[Generation]:
    return value.samples if isinstance(value, SampleSet) else [value]


def has_stats(value) -> bool:
    """Whether a stored Generation or SampleSet holds every token's statistics."""
    return all(g.entropies is not None and g.logsumexp is not None for g in _generations(value))


def map_generations(value, fn):
    """`fn` of a Generation, or a SampleSet with `fn` of each sample (its vectors' form kept)."""
    if not isinstance(value, SampleSet):
        return fn(value)
    out = dataclasses.replace(value, samples=[fn(g) for g in value.samples])
    if hasattr(value, "vectors_form"):
        out.vectors_form = value.vectors_form
    return out


def without_stats(value):
    """`value` as a call that did not ask for statistics receives it."""
    return map_generations(value, lambda g: g if g.entropies is None and g.logsumexp is None
                           else dataclasses.replace(g, entropies=None, logsumexp=None))


def _as_asked(value, want_stats: bool):
    return value if want_stats else without_stats(value)


class CachedBackend:
    """Wrap any backend; `enabled=False` passes every call through. `must_keep`: a full disk stops
    the run. `read_only` (`llm.replay`): nothing is stored, and its calls count only in `stats()`,
    not in the question's scope (the cache in front of it counts them)."""

    def __init__(self, backend, root: str | Path | None = None, enabled: bool = True,
                 vectors: str = "gram", must_keep: bool = False, read_only: bool = False):
        self.backend = backend
        self.name = backend.name
        self.n_layers = backend.n_layers
        self.hidden_size = backend.hidden_size
        self.eos_token_id = backend.eos_token_id
        self.fingerprint = getattr(backend, "fingerprint", backend.name)
        self.cache = LLMCache(Path(root) if root else paths.CACHE_DIR / "llm" / backend.name,
                              vectors=vectors)
        self.enabled = enabled
        self.must_keep = must_keep
        # statistics nearly free (the module's note): every backend but another engine (`kind`)
        self.stats_free = getattr(backend, "kind", None) is None
        self.storing = not read_only   # False once the disk was full: new calls are not stored
        self.read_only = read_only
        self._store_lock = threading.Lock()
        self.counter = CallCounter()   # every call's, whatever its scope

    scoped_counts = True   # the runner may count per question with `counting()`
    wraps_backend = True   # `base.unwrap` finds the model backend in `.backend`

    @property
    def calls(self) -> int:
        return self.counter.values["llm_calls"]

    @property
    def hits(self) -> int:
        return self.counter.values["cache_hits"]

    @property
    def misses(self) -> int:
        return self.counter.values["cache_misses"]

    def _add(self, calls=0, hits=0, misses=0, prompt_tokens=0, generated_tokens=0) -> None:
        """One or more calls; the tokens of a miss count as computed too."""
        computed = (prompt_tokens, generated_tokens) if misses else (0, 0)
        values = dict(zip(COUNTS, (calls, hits, misses, prompt_tokens, generated_tokens) + computed))
        self.counter.add(**values)
        scope = _SCOPE.get()
        if scope is not None and not self.read_only:
            scope.add(**values)

    def stats(self) -> dict[str, int]:
        return dict(self.counter.values)

    def __getattr__(self, attr: str) -> Any:   # anything else (count_tokens, encode, tokenizer, ...)
        if "backend" not in self.__dict__:      # during copy/unpickling: no recursion
            raise AttributeError(attr)
        return getattr(self.__dict__["backend"], attr)

    def _store(self, key: str, value) -> None:
        """Store a computed call where no readable entry is; a full disk: the module's note."""
        if not (self.enabled and self.storing) or self.cache.get(key) is not None:
            return
        try:
            self.cache.put(key, value)
        except DiskFullError as err:
            if self.must_keep:
                err.fix_note = ("the LLM call cache is derived data: with cache.must_keep: false a run "
                                "goes on without it")
                raise
            with self._store_lock:
                first, self.storing = self.storing, False
            if first:
                from ..core.progress import say
                say(_unstored_warning(self.cache.root, err))

    def _count(self, value, hit: bool) -> None:
        gens = _generations(value)
        self._add(calls=1, hits=int(hit), misses=int(not hit),
                  prompt_tokens=gens[0].n_prompt_tokens if gens else 0,
                  generated_tokens=sum(len(g.token_ids) for g in gens))

    def _stats_to_compute(self, want_stats: bool) -> bool:
        """Whether a call that missed computes statistics: when asked, or when nearly free."""
        return want_stats or (self.enabled and self.stats_free)

    def _keys(self, kind: str, prompt: str, params: dict, want_stats: bool) -> list[str]:
        """The keys whose entries may answer a call, in order; a computed call is stored under the
        first (the key form of this engine, the module's note), the other forms after it."""
        def key(**stats) -> str:
            return call_key(self.name, self.fingerprint, kind, prompt, {**params, **stats})
        if kind not in ("generate", "sample"):
            return [key()]
        own, other = key(want_stats=want_stats), key(want_stats=not want_stats)
        return [key(), own, other] if self.stats_free else [own, key(), other]

    def _lookup(self, kind: str, prompt: str, params: dict, want_stats: bool):
        """The first stored value that answers a call (with statistics, if it asks), or None."""
        if not self.enabled:
            return None
        for key in self._keys(kind, prompt, params, want_stats):
            value = self.cache.get(key)
            if value is not None and (has_stats(value) or not want_stats):
                return value
        return None

    def _cached(self, kind: str, prompt: str, params: dict, compute, want_stats: bool | None = None):
        """`_cached_many` of one prompt: `compute()`, or `compute(with_stats)`, on a miss."""
        return self._cached_many(kind, [prompt], params, lambda _, *stats: [compute(*stats)], want_stats)[0]

    def _cached_many(self, kind: str, prompts: Sequence[str], params: dict, compute_many,
                     want_stats: bool | None = None) -> list:
        """The stored values of several prompts; the misses go to `compute_many(prompts)`, or with
        `want_stats` given `compute_many(prompts, with_stats)`, in ONE call (a batching backend
        decodes them together)."""
        asked = bool(want_stats)
        keys = [self._keys(kind, p, params, asked)[0] for p in prompts]
        values = [self._lookup(kind, p, params, asked) for p in prompts]
        todo = [i for i, v in enumerate(values) if v is None]
        if todo:
            stats = () if want_stats is None else (self._stats_to_compute(want_stats),)
            for i, v in zip(todo, compute_many([prompts[i] for i in todo], *stats)):
                values[i] = v
                self._store(keys[i], v)
        for i, v in enumerate(values):
            self._count(v, hit=i not in todo)
        return values if want_stats is None else [_as_asked(v, want_stats) for v in values]

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        params = _generate_params(max_new_tokens, stop, want_attention)
        return self._cached("generate", prompt, params, lambda stats: self.backend.generate(
            prompt, max_new_tokens=max_new_tokens, stop=tuple(stop), want_stats=stats,
            want_attention=want_attention), want_stats)

    def generate_many(self, prompts: Sequence[str], *, max_new_tokens: int,
                      stop: Sequence[str] = (), want_stats: bool = False) -> list[Generation]:
        """The misses go to the backend in one call; entries are shared with `generate`."""
        params = _generate_params(max_new_tokens, stop)
        return self._cached_many("generate", prompts, params, lambda todo, stats: generate_many(
            self.backend, todo, max_new_tokens=max_new_tokens, stop=tuple(stop), want_stats=stats),
            want_stats)

    def sample(self, prompt: str, settings: Sampling) -> SampleSet:
        s = settings.at_layer(self.n_layers)
        return self._cached("sample", prompt, self._sample_params(s), lambda stats: self.backend.sample(
            prompt, dataclasses.replace(s, want_stats=stats)), s.want_stats)

    def sample_many(self, prompts: Sequence[str], settings: Sampling) -> list[SampleSet]:
        """The misses go to the backend in ONE call, so a batching backend decodes them together."""
        s = settings.at_layer(self.n_layers)
        return self._cached_many("sample", prompts, self._sample_params(s), lambda todo, stats:
                                 self.backend.sample_many(todo, dataclasses.replace(s, want_stats=stats)), s.want_stats)

    def generate_and_sample_many(self, prompts: Sequence[str], *, generate, sample,
                                 ) -> list[tuple[Generation, SampleSet]]:
        """Each half is stored and counted as `generate` and `sample` store and count it; prompts
        missing both go to the backend in one `generate_and_sample_many` call, a prompt missing
        one half to that half's call. `generate`/`sample`: one, or one per prompt."""
        gens = per_prompt(generate, len(prompts))
        smps = [sm.at_layer(self.n_layers) for sm in per_prompt(sample, len(prompts))]
        asked = [(bool(g.get("want_stats", False)), sm.want_stats) for g, sm in zip(gens, smps)]
        # what a computed half is given: the statistics it asked for, or (nearly free) always
        run_g = [{**g, "want_stats": self._stats_to_compute(a)} for g, (a, _) in zip(gens, asked)]
        run_s = [dataclasses.replace(sm, want_stats=self._stats_to_compute(a)) for sm, (_, a) in zip(smps, asked)]
        keys, got = [], []
        for p, g, sm, (g_stats, s_stats) in zip(prompts, gens, smps, asked):
            g_params, s_params = _generate_params(g["max_new_tokens"], g.get("stop", ())), self._sample_params(sm)
            keys.append((self._keys("generate", p, g_params, g_stats)[0],
                         self._keys("sample", p, s_params, s_stats)[0]))
            got.append([self._lookup("generate", p, g_params, g_stats), self._lookup("sample", p, s_params, s_stats)])
        missed = [[v is None for v in pair] for pair in got]
        both = [i for i, m in enumerate(missed) if all(m)]
        if both:
            for i, pair in zip(both, base_generate_and_sample_many(
                    self.backend, [prompts[i] for i in both], generate=[run_g[i] for i in both],
                    sample=[run_s[i] for i in both])):
                got[i] = list(pair)
        for i, pair in enumerate(got):
            if pair[0] is None:
                pair[0] = generate_many(self.backend, [prompts[i]], **run_g[i])[0]
            if pair[1] is None:
                pair[1] = self.backend.sample_many([prompts[i]], run_s[i])[0]
        for i, pair in enumerate(got):
            for half, value in enumerate(pair):
                if missed[i][half]:
                    self._store(keys[i][half], value)
                self._count(value, hit=not missed[i][half])
        return [(_as_asked(g, asked[i][0]), _as_asked(s, asked[i][1])) for i, (g, s) in enumerate(got)]

    def score(self, prompt: str, continuation: str) -> Generation:
        return self._cached("score", prompt, {"continuation": continuation},
                            lambda: self.backend.score(prompt, continuation))

    def read_logprobs(self, prompt: str, continuation_ids: Sequence[int],
                      reads: Sequence[tuple[int, int]]) -> Generation:
        ids, rd = [int(t) for t in continuation_ids], [[int(j), int(t)] for j, t in reads]
        return self._cached("read_logprobs", prompt, {"ids": ids, "reads": rd},
                            lambda: self.backend.read_logprobs(prompt, ids, rd))

    def attention_rows(self, token_ids: Sequence[int], positions: Sequence[int]) -> list[list[float]]:
        ids, pos = [int(t) for t in token_ids], [int(p) for p in positions]
        key = call_key(self.name, self.fingerprint, "attention_rows", "", {"ids": ids, "positions": pos})
        rows = self.cache.get(key) if self.enabled else None
        hit = rows is not None
        if not hit:
            rows = [list(map(float, r)) for r in self.backend.attention_rows(ids, pos)]
            self._store(key, rows)
        self._add(calls=1, hits=int(hit), misses=int(not hit), prompt_tokens=len(ids))
        return rows

    def _sample_params(self, settings: Sampling) -> dict:
        """A sample call's key parameters (`settings` at the model's layer, the vector form)."""
        return {**settings.key_params(), "cache_vectors": self.cache.vectors}


def _unstored_warning(root: Path, err: DiskFullError) -> str:
    """The one warning of a call cache the full disk will not take, as one wrapped paragraph."""
    from ..core.disk import free_bytes, human_bytes, mount_of, tree_bytes

    size, complete = tree_bytes(root)
    why = "your disk quota there is used up" if err.code == errno.EDQUOT else "the disk holding it is full"
    text = (f"warning: the LLM call cache cannot store new calls: {why}. "
            f"It lives in {paths.repo_relative(root)} ({'at least ' if not complete else ''}"
            f"{human_bytes(size)}), on the file system mounted at {mount_of(root)} "
            f"({human_bytes(free_bytes(root))} free). This run goes on without storing its new calls "
            "(hits are still read): the cache is derived data, so nothing the run needs is lost, but a "
            "later run computes those calls again. To store them, free space there or point "
            "SEAKR_CACHE_DIR at a disk with room; to stop instead when this happens, set "
            "cache.must_keep: true.")
    return textwrap.fill(text, width=100, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)
