"""The on-disk LLM call cache with a scripted backend (no model needed)."""
import numpy as np

from seakr_repro.llm.base import Generation, SampleSet
from seakr_repro.llm.cache import CachedBackend, LLMCache, call_key


class Scripted:
    name, n_layers, hidden_size, eos_token_id, fingerprint = "scripted", 4, 3, 0, "w1"

    def __init__(self):
        self.n = 0

    def generate(self, prompt, *, max_new_tokens, stop=(), want_stats=False, want_attention=False):
        self.n += 1
        return Generation(text=f" {prompt}{self.n}", token_ids=[5, 6], tokens=[" a", "b"],
                          logprobs=[-0.1, -1 / 3], n_prompt_tokens=7)

    def sample(self, prompt, *, k, max_new_tokens, stop=(), temperature=1.0, top_k=50,
               top_p=0.9, seed=42, layer=None, hook="mlp_out", want_stats=False):
        self.n += 1
        vec = np.random.default_rng(seed).standard_normal((k, 3)).astype(np.float32)
        return SampleSet([Generation(text=str(i), token_ids=[i], n_prompt_tokens=7)
                          for i in range(k)], vec, layer if layer is not None else 1, hook)

    def score(self, prompt, continuation):
        self.n += 1
        return Generation(text=continuation, n_prompt_tokens=7)

    def count_tokens(self, text):
        return len(text)


def test_hits_return_the_stored_values_and_skip_the_backend(tmp_path):
    inner = Scripted()
    cb = CachedBackend(inner, tmp_path)
    a = cb.generate("p", max_new_tokens=3, stop=["\n"])
    b = cb.generate("p", max_new_tokens=3, stop=["\n"])
    assert a == b and inner.n == 1 and cb.hits == 1
    s1 = cb.sample("p", k=3, max_new_tokens=5, seed=9)
    s2 = CachedBackend(Scripted(), tmp_path).sample("p", k=3, max_new_tokens=5, seed=9)  # new process
    assert np.array_equal(s1.vectors, s2.vectors) and s1.samples == s2.samples
    assert s2.layer == 1 and s2.hook == "mlp_out"
    # defaults are filled in: an explicit default parameter hits the same entry
    cb.sample("p", k=3, max_new_tokens=5, seed=9, top_p=0.9, layer=1)
    assert inner.n == 2 and cb.stats() == {"llm_calls": 4, "cache_hits": 2, "cache_misses": 2,
                                           "prompt_tokens": 28, "generated_tokens": 10}


def test_every_parameter_and_the_weights_change_the_key(tmp_path):
    base = call_key("m", "w1", "sample", "p", {"k": 3, "seed": 1})
    assert base != call_key("m", "w2", "sample", "p", {"k": 3, "seed": 1})
    assert base != call_key("m", "w1", "sample", "p", {"k": 3, "seed": 2})
    assert base != call_key("m", "w1", "generate", "p", {"k": 3, "seed": 1})
    assert base != call_key("m", "w1", "sample", "p ", {"k": 3, "seed": 1})
    inner = Scripted()
    cb = CachedBackend(inner, tmp_path)
    cb.generate("p", max_new_tokens=3)
    cb.generate("p", max_new_tokens=4)
    cb.score("p", "x")
    cb.score("p", "y")
    assert inner.n == 4 and cb.hits == 0


def test_disabled_cache_always_calls_through_and_writes_nothing(tmp_path):
    inner = Scripted()
    cb = CachedBackend(inner, tmp_path, enabled=False)
    cb.generate("p", max_new_tokens=3)
    cb.generate("p", max_new_tokens=3)
    assert inner.n == 2 and cb.calls == 2 and not any(tmp_path.iterdir())


def test_a_damaged_entry_is_recomputed(tmp_path):
    inner = Scripted()
    cb = CachedBackend(inner, tmp_path)
    cb.generate("p", max_new_tokens=3)
    (entry,) = tmp_path.rglob("*.json")
    entry.write_text("{not json")
    assert LLMCache(tmp_path).get(entry.stem) is None
    cb.generate("p", max_new_tokens=3)
    assert inner.n == 2 and cb.misses == 2
