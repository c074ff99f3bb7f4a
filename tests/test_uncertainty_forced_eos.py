"""The forced-EOS sequence as the official engine builds it (vllm_uncertainty's stop checker
overwrites the last generated token with EOS), on the real SmolLM2 tokenizer and model.

Reference vectors come from one full forward pass without a KV cache, hooked here."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seakr_repro.core.errors import UserError
from seakr_repro.llm.stops import cut_at_stop, find_stop, forced_eos_ids, forced_eos_of, stop_end
from seakr_repro.llm.sampling_settings import Sampling

PROMPT = ("Question: What is the capital of France?\nAnswer: Paris is the capital of France. "
          "So the answer is Paris.\n\nQuestion: Who wrote Hamlet?\nAnswer:")
LAYER = 14


@pytest.fixture(scope="module")
def backend():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir
    torch.set_num_threads(1)
    return HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")


def _engine_stop(decode, ids, stop):
    """Generate token by token and stop as the official engine does: right after the token whose
    text completes a stop string. Returns (all ids up to it, kept count, text)."""
    out = []
    for t in ids:
        out.append(t)
        if find_stop(decode(out), stop) >= 0:
            break
    pieces = [decode(out[:i + 1])[len(decode(out[:i])):] for i in range(len(out))]
    text, n = cut_at_stop(pieces, stop)
    return out, n, text


def _reference(backend, seq, layer=LAYER):
    """mlp_out at the last position of prompt + seq: one full pass, no cache."""
    ids = backend._encode(PROMPT) + list(seq)
    box = {}
    h = backend.model.model.layers[layer].mlp.register_forward_hook(lambda m, i, o: box.__setitem__("v", o))
    try:
        with torch.inference_mode():
            backend.model(input_ids=torch.tensor([ids]))
    finally:
        h.remove()
    return box["v"][0, -1].float().numpy()


# ------------------------------------------------------------------ the pure function
def test_a_dot_space_stop_keeps_the_period_before_eos(backend):
    decode, eos = backend._decode, backend.eos_token_id
    ids = backend.tokenizer("He was born in 1959. Ivania", add_special_tokens=False)["input_ids"]
    all_ids, n, text = _engine_stop(decode, ids, [". "])
    assert text == "He was born in 1959"
    assert decode(all_ids).endswith("1959. I")            # " I" (of "Ivania") completed ". "
    seq = forced_eos_ids(all_ids, "stop", n, eos, "replace_last")
    assert seq[-1] == eos and decode(seq[:-1]) == "He was born in 1959."   # the period stays
    appended = forced_eos_ids(all_ids, "stop", n, eos, "append")
    assert decode(appended[:-1]) == "He was born in 1959"                  # the old sequence
    pieces = [decode(ids[:i + 1])[len(decode(ids[:i])):] for i in range(len(ids))]
    assert stop_end(pieces, [". "]) == len(all_ids)         # where an engine would have stopped


def test_at_max_tokens_the_last_token_is_replaced_by_eos():
    ids = list(range(10, 110))                                     # 100 generated tokens
    seq = forced_eos_ids(ids, "length", 100, 2, "replace_last")
    assert seq == ids[:99] + [2] and len(seq) == 100
    assert forced_eos_ids(ids, "length", 100, 2, "append") == ids + [2]


def test_a_sampled_eos_is_used_as_is():
    ids = [5, 6, 7]                                                # then EOS was sampled
    for mode in ("replace_last", "append"):
        assert forced_eos_ids(ids, "eos", 3, 2, mode) == [5, 6, 7, 2]
    assert forced_eos_ids([], "eos", 0, 2, "replace_last") == [2]
    with pytest.raises(UserError, match="forced_eos"):
        forced_eos_ids(ids, "eos", 3, 2, "drop")


# ------------------------------------------------------------------ the transformers backend
def test_backend_vector_after_a_dot_space_stop_is_taken_after_the_period(backend):
    args = dict(k=2, max_new_tokens=30, stop=[". "], temperature=0.0, layer=LAYER, hook="mlp_out")
    faithful = backend.sample(PROMPT, Sampling(forced_eos="replace_last", **args))
    fixed = backend.sample(PROMPT, Sampling(forced_eos="append", **args))
    g = faithful.samples[0]
    assert g.finish_reason == "stop" and g.text.endswith("Shakespeare")
    # the uncut ids end with the token that completed ". " (greedy: "." then " So")
    assert backend._decode(g.all_token_ids).endswith("Shakespeare. So")
    seq = forced_eos_of(g, backend.eos_token_id, "replace_last")
    assert backend._decode(seq[:-1]).endswith("Shakespeare.")
    np.testing.assert_allclose(faithful.vectors[0], _reference(backend, seq), atol=2e-4, rtol=1e-4)
    old = g.token_ids + [backend.eos_token_id]
    np.testing.assert_allclose(fixed.vectors[0], _reference(backend, old), atol=2e-4, rtol=1e-4)
    assert not np.allclose(faithful.vectors[0], fixed.vectors[0], atol=1e-3)


def test_backend_at_max_tokens_replaces_the_last_token(backend):
    ss = backend.sample(PROMPT, Sampling(k=1, max_new_tokens=4, stop=[], temperature=0.0, layer=LAYER,
                        forced_eos="replace_last"))
    g = ss.samples[0]
    assert g.finish_reason == "length" and len(g.all_token_ids) == 4 == len(g.token_ids)
    seq = g.all_token_ids[:3] + [backend.eos_token_id]
    np.testing.assert_allclose(ss.vectors[0], _reference(backend, seq), atol=2e-4, rtol=1e-4)


def test_backend_uses_a_sampled_eos_as_is(backend, monkeypatch):
    greedy = backend.generate(PROMPT, max_new_tokens=3)
    # make the greedy third token the model's EOS: decoding then "samples EOS" at step 3
    monkeypatch.setattr(backend, "eos_token_id", greedy.token_ids[2])
    ss = backend.sample(PROMPT, Sampling(k=1, max_new_tokens=10, stop=[], temperature=0.0, layer=LAYER,
                        forced_eos="replace_last"))
    g = ss.samples[0]
    assert g.finish_reason == "eos" and g.all_token_ids == greedy.token_ids[:2]
    np.testing.assert_allclose(ss.vectors[0], _reference(backend, greedy.token_ids[:3]),
                               atol=2e-4, rtol=1e-4)


def test_step02_vectors_use_the_same_forced_sequence(backend):
    from seakr_repro.steps import extraction
    ss = backend.sample(PROMPT, Sampling(k=2, max_new_tokens=30, stop=[". "], temperature=0.0, layer=LAYER,
                        forced_eos="replace_last"))
    prefixes = extraction.forced_eos_prefixes(ss.samples, backend.eos_token_id, "replace_last")
    allv = extraction.eos_vectors_all_layers(backend, PROMPT, prefixes)
    np.testing.assert_allclose(allv["mlp_out"][LAYER], ss.vectors, atol=1e-5, rtol=1e-5)


def test_the_cache_key_includes_the_forced_eos_mode(tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    from fakes import FakeBackend
    cb = CachedBackend(FakeBackend(lambda p, s: "x"), tmp_path)
    a = cb._sample_params(Sampling(k=3, max_new_tokens=4))
    b = cb._sample_params(Sampling(k=3, max_new_tokens=4, forced_eos="append"))
    c = cb._sample_params(Sampling(k=3, max_new_tokens=4, forced_eos="replace_last"))
    assert a == b and a != c
