"""The on-disk LLM call cache with a scripted backend (no model needed)."""
import numpy as np
import pytest

from seakr_repro.llm.base import Generation, SampleSet
from seakr_repro.llm.cache import CachedBackend, LLMCache, call_key
from seakr_repro.llm.sampling_settings import Sampling


class Scripted:
    name, n_layers, hidden_size, eos_token_id, fingerprint = "scripted", 4, 3, 0, "w1"

    def __init__(self):
        self.n = 0

    def generate(self, prompt, *, max_new_tokens, stop=(), want_stats=False, want_attention=False):
        self.n += 1
        return Generation(text=f" {prompt}{self.n}", token_ids=[5, 6], tokens=[" a", "b"],
                          logprobs=[-0.1, -1 / 3], n_prompt_tokens=7)

    def sample(self, prompt, s):
        self.n += 1
        vec = np.random.default_rng(s.seed).standard_normal((s.k, 3)).astype(np.float32)
        return SampleSet([Generation(text=str(i), token_ids=[i], n_prompt_tokens=7)
                          for i in range(s.k)], vec, s.layer if s.layer is not None else 1, s.hook)

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
    s1 = cb.sample("p", Sampling(k=3, max_new_tokens=5, seed=9))
    s2 = CachedBackend(Scripted(), tmp_path).sample("p", Sampling(k=3, max_new_tokens=5, seed=9))  # new process
    # k = d = 3 leaves no room for a k x k factor: this entry holds the float16 vectors
    assert s2.vectors_form == "float16" and s1.samples == s2.samples
    np.testing.assert_allclose(s1.vectors, s2.vectors, atol=2e-3)
    assert s2.layer == 1 and s2.hook == "mlp_out"
    # defaults are filled in: an explicit default parameter hits the same entry
    cb.sample("p", Sampling(k=3, max_new_tokens=5, seed=9, top_p=0.9, layer=1))
    assert inner.n == 2 and cb.stats() == {"llm_calls": 4, "cache_hits": 2, "cache_misses": 2,
                                           "prompt_tokens": 28, "generated_tokens": 10,
                                           "computed_prompt_tokens": 14, "computed_generated_tokens": 5}


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
    (entry,) = tmp_path.rglob("*.npz")
    entry.write_bytes(entry.read_bytes()[:40])
    assert LLMCache(tmp_path).get(entry.stem) is None
    cb.generate("p", max_new_tokens=3)
    assert inner.n == 2 and cb.misses == 2


def _old_format_bytes(value: SampleSet) -> int:
    """Bytes of CACHE_FORMAT 1 for one sample call: float32 .npy + indent-free JSON."""
    import dataclasses
    import io as _io
    import json
    buf = _io.BytesIO()
    np.save(buf, np.asarray(value.vectors, dtype=np.float32), allow_pickle=False)
    meta = {"type": "sampleset", "layer": value.layer, "hook": value.hook,
            "samples": [dataclasses.asdict(g) for g in value.samples]}
    return buf.tell() + len((json.dumps(meta, ensure_ascii=False) + "\n").encode())


def _paper_like_sampleset(k=20, d=4096, n_tokens=60, seed=0) -> SampleSet:
    rng = np.random.default_rng(seed)
    gens = [Generation(text=" word" * n_tokens, token_ids=rng.integers(0, 32000, n_tokens).tolist(),
                       tokens=[" word"] * n_tokens, logprobs=rng.normal(-1, 1, n_tokens).tolist(),
                       n_prompt_tokens=1500) for _ in range(k)]
    base = rng.normal(size=(1, d))
    vec = (base + 0.3 * rng.normal(size=(k, d))).astype(np.float32)
    return SampleSet(gens, vec, 15, "mlp_out")


def test_compact_sample_entries_round_trip_and_are_a_quarter_of_format_1(tmp_path):
    from seakr_repro.llm.cache import from_gram_factor, gram_factor
    from seakr_repro.uncertainty import eigen_score, u_from_sampleset

    ss = _paper_like_sampleset()
    ss.samples[3] = Generation(text="  ", token_ids=[2], tokens=[""], logprobs=[-0.5])   # empty
    for form, tol in (("gram", 1e-5), ("float16", 1e-2)):
        cache = LLMCache(tmp_path / form, vectors=form)
        cache.put("ab" * 32, ss)
        entry = cache.path("ab" * 32)
        got = cache.get("ab" * 32)
        assert got.samples == ss.samples and (got.layer, got.hook) == (15, "mlp_out")
        assert got.vectors.shape == ss.vectors.shape and got.vectors_form == form
        for variant in ("seakr", "inside"):
            assert u_from_sampleset(got, variant=variant) == pytest.approx(
                u_from_sampleset(ss, variant=variant), abs=tol)
        ratio = entry.stat().st_size / _old_format_bytes(ss)
        print(f"{form}: {entry.stat().st_size} bytes vs format 1 {_old_format_bytes(ss)}: {ratio:.3f}")
        assert ratio <= (0.25 if form == "gram" else 0.6)
    # the factor reproduces the centred Gram matrix exactly (rows of the stand-in are centred)
    f = gram_factor(ss.vectors)
    z = ss.vectors.astype(np.float64)
    zc = z - z.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(f @ f.T, zc @ zc.T, rtol=1e-10, atol=1e-8)
    stand_in = from_gram_factor(f, 4096)
    np.testing.assert_allclose(stand_in.mean(axis=1), 0, atol=1e-5)
    assert eigen_score(stand_in[:5]) == pytest.approx(eigen_score(ss.vectors[:5]), abs=1e-5)
    assert from_gram_factor(gram_factor(ss.vectors[:0]), 4096).shape == (0, 4096)


def test_the_vector_form_is_part_of_the_key_and_checked(tmp_path):
    from seakr_repro.core.errors import UserError

    inner = Scripted()
    CachedBackend(inner, tmp_path, vectors="gram").sample("p", Sampling(k=2, max_new_tokens=5))
    CachedBackend(inner, tmp_path, vectors="float16").sample("p", Sampling(k=2, max_new_tokens=5))
    assert inner.n == 2
    with pytest.raises(UserError, match="cache.vectors"):
        LLMCache(tmp_path, vectors="float8")
