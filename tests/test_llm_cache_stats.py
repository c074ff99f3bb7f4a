"""Statistics in the call cache: where they are nearly free they are not part of the key (a call that
asks for them and one that does not share one computed call, and each receives exactly what its own
computation gives); on another engine they are. Either way an entry is written once, and the cache
keys of earlier formats keep finding their entries."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from seakr_repro.llm.cache import CachedBackend, has_stats, without_stats
from seakr_repro.llm.synthetic import SyntheticBackend
from seakr_repro.llm.sampling_settings import Sampling

PROMPT = "Question: Who was born first, Aristotle or Plato?\nAnswer:"
GEN = dict(max_new_tokens=12, stop=["\n"])
SAMPLE = dict(k=4, max_new_tokens=10, stop=["\n"], seed=3)


class Counting:
    """A backend's calls counted, and which of them computed statistics."""

    def __init__(self, inner, kind=None):
        self.inner, self.computed = inner, []
        if kind:
            self.kind = kind
        for attr in ("name", "fingerprint", "n_layers", "hidden_size", "eos_token_id"):
            setattr(self, attr, getattr(inner, attr))

    def generate(self, prompt, **kw):
        self.computed.append(("generate", kw.get("want_stats", False)))
        return self.inner.generate(prompt, **kw)

    def generate_many(self, prompts, **kw):
        self.computed += [("generate", kw.get("want_stats", False))] * len(prompts)
        return [self.inner.generate(p, **kw) for p in prompts]

    def sample(self, prompt, settings):
        self.computed.append(("sample", settings.want_stats))
        return self.inner.sample(prompt, settings)

    def sample_many(self, prompts, settings):
        return [self.sample(p, settings) for p in prompts]


def _gram(vectors):
    z = np.asarray(vectors, np.float64)
    z = z - z.mean(axis=1, keepdims=True)
    return z @ z.T


def _same(a, b):
    """Two Generations or SampleSets alike in every field (a cached SampleSet's vectors stand in
    for the model's with the same centred Gram matrix, `llm.cache`)."""
    if hasattr(a, "samples"):
        assert [dataclasses.asdict(g) for g in a.samples] == [dataclasses.asdict(g) for g in b.samples]
        np.testing.assert_allclose(_gram(a.vectors), _gram(b.vectors), rtol=1e-4, atol=1e-6)
    else:
        assert dataclasses.asdict(a) == dataclasses.asdict(b)


@pytest.mark.parametrize("stats_first", [True, False])
def test_a_call_with_statistics_and_one_without_are_computed_once(tmp_path, stats_first):
    plain = SyntheticBackend("syn", n_layers=4, hidden_size=16)
    inner = Counting(SyntheticBackend("syn", n_layers=4, hidden_size=16))
    cached = CachedBackend(inner, tmp_path)
    order = (True, False) if stats_first else (False, True)
    got = {w: cached.generate(PROMPT, want_stats=w, **GEN) for w in order}
    got_s = {w: cached.sample(PROMPT, Sampling(want_stats=w, **SAMPLE)) for w in order}
    assert len(inner.computed) == 2 and cached.hits == 2          # one generate, one sample
    for w in (True, False):      # each as the backend gives it to a call that asks so
        _same(got[w], plain.generate(PROMPT, want_stats=w, **GEN))
        _same(got_s[w], plain.sample(PROMPT, Sampling(want_stats=w, **SAMPLE)))
    assert has_stats(got[True]) and got[False].entropies is None and got[False].logsumexp is None


def test_the_batched_paths_share_the_entries_of_the_single_calls(tmp_path):
    from seakr_repro.llm.base import generate_and_sample_many

    inner = Counting(SyntheticBackend("syn", n_layers=4, hidden_size=16))
    cached = CachedBackend(inner, tmp_path)
    prompts = [PROMPT, PROMPT + " Plato"]
    cached.generate_many(prompts, want_stats=False, **GEN)
    cached.sample_many(prompts, Sampling(want_stats=False, **SAMPLE))
    n = len(inner.computed)
    pairs = generate_and_sample_many(cached, prompts, generate={**GEN, "want_stats": True},
                                     sample=Sampling(**SAMPLE, want_stats=True))
    assert len(inner.computed) == n == 4 and all(has_stats(g) and has_stats(s) for g, s in pairs)


class Drifting(Counting):
    """Each computation answers differently (as vLLM's greedy tokens can with the batch around them)."""

    def generate(self, prompt, **kw):
        gen = super().generate(prompt, **kw)
        return dataclasses.replace(gen, text=f"{gen.text} #{len(self.computed)}")


def test_on_another_engine_a_call_with_statistics_never_replaces_one_without(tmp_path):
    """Where statistics are not nearly free (another engine, `kind`), they are part of the key:
    each call computes what it asks once, and a call without them keeps its own answer."""
    inner = Drifting(SyntheticBackend("syn", n_layers=4, hidden_size=16), kind="vllm")
    cached = CachedBackend(inner, tmp_path)
    first = cached.generate(PROMPT, want_stats=False, **GEN)
    with_stats = cached.generate(PROMPT, want_stats=True, **GEN)
    assert inner.computed == [("generate", False), ("generate", True)] and has_stats(with_stats)
    assert with_stats.text != first.text          # the two computations differ here
    assert cached.generate(PROMPT, want_stats=False, **GEN) == first
    assert cached.generate(PROMPT, want_stats=True, **GEN) == with_stats and cached.hits == 2


def test_a_call_that_needs_statistics_an_entry_lacks_leaves_the_entry_as_it_is(tmp_path):
    """An entry is written once: one without statistics (stored by an earlier version) under the
    key a call with statistics would store under is not replaced by that call's computation."""
    from seakr_repro.llm.cache import _generate_params, call_key

    inner = Drifting(SyntheticBackend("syn", n_layers=4, hidden_size=16))
    cached = CachedBackend(inner, tmp_path)
    stored = SyntheticBackend("syn", n_layers=4, hidden_size=16).generate(PROMPT, **GEN)
    key = call_key("syn", cached.fingerprint, "generate", PROMPT, _generate_params(**GEN))
    cached.cache.put(key, stored)
    before = cached.cache.path(key).read_bytes()
    assert has_stats(cached.generate(PROMPT, want_stats=True, **GEN)) and len(inner.computed) == 1
    assert cached.cache.path(key).read_bytes() == before
    assert cached.generate(PROMPT, want_stats=False, **GEN) == stored and len(inner.computed) == 1


# keys of these calls as the code at c6a7370 computed them (the format without `want_stats`,
# sample settings passed as keywords): a user's computed calls under them must keep being found
CURRENT_FORMAT_KEYS = [
    ("generate", "b4ef97d5eaaea93ae880cde834a0c1fa19c6e662e60b1ea8fba74cb158fb81a0"),
    (Sampling(k=4, max_new_tokens=10), "4bbf204fb6e50e1a65b63f8daf225eeeb2e617a02fb1cb01417d00cf654840d5"),
    (Sampling(k=3, max_new_tokens=6, stop=("\n", ". "), temperature=0.7, top_k=40, top_p=0.95, seed=7,
              layer=2, hook="residual", forced_eos="replace_last", want_stats=True),
     "ead2a985bdf9ea43e3af04278b71679edc8fbd3ddeeeab156c02c3eeb3dea241"),
]


@pytest.mark.parametrize("kind", [None, "vllm"])
@pytest.mark.parametrize("call, key", CURRENT_FORMAT_KEYS)
def test_entries_under_the_current_key_format_are_found(tmp_path, call, key, kind):
    """Entries stored under the keys of the format before `Sampling` (recorded above) answer the
    same calls now, on either kind of backend, without computing anything."""
    plain = SyntheticBackend("syn", n_layers=4, hidden_size=16)
    inner = Counting(SyntheticBackend("syn", n_layers=4, hidden_size=16), kind=kind)
    cached = CachedBackend(inner, tmp_path)
    if call == "generate":
        stored = plain.generate(PROMPT, want_stats=True, max_new_tokens=12, stop=["\n"])
        cached.cache.put(key, stored)
        assert cached.generate(PROMPT, want_stats=True, max_new_tokens=12, stop=["\n"]) == stored
    else:
        stored = plain.sample(PROMPT, dataclasses.replace(call, want_stats=True))
        cached.cache.put(key, stored)
        assert cached.sample(PROMPT, call).samples == (stored if call.want_stats else without_stats(stored)).samples
    assert not inner.computed and cached.hits == 1


def test_the_counts_keep_computed_tokens_apart_from_all(tmp_path):
    cached = CachedBackend(SyntheticBackend("syn", n_layers=4, hidden_size=16), tmp_path)
    first = cached.generate(PROMPT, **GEN)
    cached.generate(PROMPT, **GEN)
    counts = cached.stats()
    n = len(first.token_ids)
    assert (counts["llm_calls"], counts["cache_hits"], counts["generated_tokens"]) == (2, 1, 2 * n)
    assert counts["computed_generated_tokens"] == n
    assert counts["computed_prompt_tokens"] == first.n_prompt_tokens


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seakr_repro.doubles.llama_tokenizer import build_tokenizer
    from seakr_repro.doubles.random_llama import random_llama

    tok = build_tokenizer(tmp_path_factory.mktemp("tok"))
    return random_llama("tiny", tok, "cpu", torch.float32, seed=1), tok


@pytest.mark.parametrize("path", ["one_sync", "python", "fused", "static"])
def test_the_transformers_backend_gives_the_same_tokens_with_or_without_statistics(tiny, path):
    """What the key leaves out changes nothing else: on each CPU decode path, greedy and sampled
    calls, alone and batched, give the same tokens, log-probs and vectors either way."""
    from seakr_repro.llm.base import generate_and_sample_many
    from seakr_repro.llm.hf.backend import HFBackend

    model, tok = tiny
    be = HFBackend(model, tok, "tiny", decode=path)
    prompts = [PROMPT, PROMPT + " Plato was"]
    plain = [be.generate(p, max_new_tokens=12, want_stats=False) for p in prompts]
    stats = [be.generate(p, max_new_tokens=12, want_stats=True) for p in prompts]
    assert [without_stats(g) for g in stats] == plain and all(has_stats(g) for g in stats)
    many = be.generate_many(prompts, max_new_tokens=12, want_stats=True)
    assert [without_stats(g) for g in many] == be.generate_many(prompts, max_new_tokens=12)
    s_plain = be.sample(PROMPT, Sampling(k=4, max_new_tokens=10, seed=3, layer=1, want_stats=False))
    s_stats = be.sample(PROMPT, Sampling(k=4, max_new_tokens=10, seed=3, layer=1, want_stats=True))
    assert without_stats(s_stats).samples == s_plain.samples
    np.testing.assert_array_equal(s_stats.vectors, s_plain.vectors)
    both = {w: generate_and_sample_many(be, prompts, generate=dict(max_new_tokens=12, want_stats=w),
                                        sample=Sampling(k=4, max_new_tokens=10, seed=3, layer=1, want_stats=w))
            for w in (False, True)}
    for (g0, s0), (g1, s1) in zip(both[False], both[True]):
        assert without_stats(g1) == g0 and without_stats(s1).samples == s0.samples
        np.testing.assert_array_equal(s1.vectors, s0.vectors)


@pytest.mark.parametrize("stored_with_stats", [False, True])
def test_an_entry_stored_while_statistics_were_in_the_key_is_still_found(tmp_path, stored_with_stats):
    """A cache filled before this key (statistics in it) keeps serving: its calls were computed
    exactly as asked."""
    from seakr_repro.llm.cache import LLMCache, call_key

    plain = SyntheticBackend("syn", n_layers=4, hidden_size=16)
    old = plain.generate(PROMPT, want_stats=stored_with_stats, **GEN)
    params = dict(max_new_tokens=GEN["max_new_tokens"], stop=GEN["stop"], want_stats=stored_with_stats,
                  want_attention=False)
    inner = Counting(SyntheticBackend("syn", n_layers=4, hidden_size=16))
    cached = CachedBackend(inner, tmp_path)
    LLMCache(tmp_path).put(call_key("syn", cached.fingerprint, "generate", PROMPT, params), old)
    assert cached.generate(PROMPT, want_stats=False, **GEN) == without_stats(old) and not inner.computed
    cached.generate(PROMPT, want_stats=True, **GEN)        # served only by an entry with statistics
    assert len(inner.computed) == (0 if stored_with_stats else 1)
