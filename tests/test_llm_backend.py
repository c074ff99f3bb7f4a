"""The transformers backend on the real default model (SmolLM2-135M-Instruct), tiny prompts.

References are computed independently: full forward passes without a KV cache, hooks registered
here (not through seakr_repro.llm.hooks), `output_hidden_states`, and transformers' `generate`.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from seakr_repro.llm.sampling_settings import Sampling

PROMPT = ("Question: What is the capital of France?\nAnswer: Paris is the capital of France. "
          "So the answer is Paris.\n\nQuestion: Who wrote Hamlet?\nAnswer:")
STOP = ["\n\n", "\nQuestion:", ". "]
SAMPLE_ARGS = dict(k=3, max_new_tokens=8, stop=STOP, temperature=1.0, top_k=50, top_p=0.9)
LAYERS = (14, 3)          # the middle layer of 30 (official rule) and a low one


@pytest.fixture(scope="session")
def backend():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir
    # The test machine's cores are shared: one thread avoids OpenMP stalls under contention.
    torch.set_num_threads(1)
    return HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")


@pytest.fixture(scope="module")
def samples(backend):
    """sample() at both hooks and two layers, all with seed 7 (so the same samples each time)."""
    return {(layer, hook): backend.sample(PROMPT, Sampling(seed=7, layer=layer, hook=hook, **SAMPLE_ARGS))
            for layer in LAYERS for hook in ("mlp_out", "residual")}


def _reference_vectors(backend, completion_ids, layer):
    """mlp_out and residual at the EOS of prompt + completion + EOS: one full pass, no cache."""
    ids = backend._encode(PROMPT) + list(completion_ids) + [backend.eos_token_id]
    box = {}
    handle = backend.model.model.layers[layer].mlp.register_forward_hook(
        lambda m, i, o: box.__setitem__("mlp", o))
    try:
        with torch.inference_mode():
            out = backend.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    finally:
        handle.remove()
    return box["mlp"][0, -1].float().numpy(), out.hidden_states[layer + 1][0, -1].float().numpy()


def test_eos_vectors_equal_an_independent_full_forward(backend, samples):
    for layer in LAYERS:
        for i, gen in enumerate(samples[(layer, "mlp_out")].samples):
            ref_mlp, ref_res = _reference_vectors(backend, gen.token_ids, layer)
            got_mlp = samples[(layer, "mlp_out")].vectors[i]
            got_res = samples[(layer, "residual")].vectors[i]
            assert got_mlp.dtype == np.float32 and got_mlp.shape == (backend.hidden_size,)
            np.testing.assert_allclose(got_mlp, ref_mlp, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(got_res, ref_res, rtol=1e-4, atol=1e-4)
            # the two hooks really are different quantities
            assert not np.allclose(got_mlp, got_res, atol=1e-2)


def test_sample_sets_report_layer_hook_and_default_middle_layer(backend, samples):
    s = samples[(14, "residual")]
    assert (s.layer, s.hook, s.vectors.shape) == (14, "residual", (3, backend.hidden_size))
    tiny = backend.sample("Question: 2+2?\nAnswer:", Sampling(k=2, max_new_tokens=2, seed=1))
    assert tiny.layer == 14 and tiny.hook == "mlp_out"   # 30 // 2 - 1
    assert all(g.finish_reason in ("stop", "eos", "length") for g in tiny.samples)


def test_same_seed_same_samples_and_vectors_other_seed_differs(backend, samples):
    first = samples[(14, "mlp_out")]
    again = backend.sample(PROMPT, Sampling(seed=7, layer=14, hook="mlp_out", **SAMPLE_ARGS))
    assert [g.token_ids for g in again.samples] == [g.token_ids for g in first.samples]
    assert np.array_equal(again.vectors, first.vectors)
    other = backend.sample(PROMPT, Sampling(seed=8, layer=14, hook="mlp_out", **SAMPLE_ARGS))
    assert [g.token_ids for g in other.samples] != [g.token_ids for g in first.samples]
    # the samples of one call are not all the same either (the rows draw independently)
    assert len({tuple(g.token_ids) for g in first.samples + other.samples}) > 1


def test_samples_are_cut_before_their_stop_string(backend, samples):
    for gen in samples[(14, "mlp_out")].samples:
        assert not any(s in gen.text for s in STOP)
        assert backend._decode(gen.token_ids) == gen.text[: len(backend._decode(gen.token_ids))]
        assert len(gen.logprobs) == len(gen.token_ids) == len(gen.tokens)
        assert len(gen.token_ids) <= SAMPLE_ARGS["max_new_tokens"]


def test_greedy_generate_equals_transformers_generate(backend):
    prompt = "Question: Who wrote Hamlet?\nAnswer:"
    gen = backend.generate(prompt, max_new_tokens=10)
    ids = backend._encode(prompt)
    with torch.inference_mode():
        ref = backend.model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False,
                                     pad_token_id=backend.eos_token_id)[0, len(ids):].tolist()
    if backend.eos_token_id in ref:
        ref = ref[: ref.index(backend.eos_token_id)]
    assert gen.token_ids == ref
    assert gen.n_prompt_tokens == len(ids) == backend.count_tokens(prompt)


def test_stop_strings_cut_the_text_and_the_tokens(backend):
    prompt = "Question: Who wrote Hamlet?\nAnswer:"
    full = backend.generate(prompt, max_new_tokens=10)
    assert full.finish_reason in ("length", "eos")
    word = full.tokens[2]                        # a stop string the greedy text is known to reach
    cut = backend.generate(prompt, max_new_tokens=10, stop=["zzz", word])
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(word)]
    assert cut.token_ids == full.token_ids[:2]   # the stop string's token is gone
    assert cut.logprobs == full.logprobs[:2]


def test_logprobs_and_stats_match_a_teacher_forced_pass(backend):
    prompt = "Question: Who wrote Hamlet?\nAnswer:"
    gen = backend.generate(prompt, max_new_tokens=6, want_stats=True)
    p_ids = backend._encode(prompt)
    with torch.inference_mode():
        logits = backend.model(input_ids=torch.tensor([p_ids + gen.token_ids])).logits[0].float()
    logits = logits[len(p_ids) - 1: -1]
    logp = torch.log_softmax(logits, -1)
    want = logp[torch.arange(len(gen.token_ids)), torch.tensor(gen.token_ids)].numpy()
    np.testing.assert_allclose(gen.logprobs, want, atol=1e-4)
    np.testing.assert_allclose(gen.entropies, -(logp.exp() * logp).sum(-1).numpy(), atol=1e-4)
    np.testing.assert_allclose(gen.logsumexp, torch.logsumexp(logits, -1).numpy(), atol=1e-3)
    # greedy tokens are the argmax, so each is at least as likely as any other
    assert all(lp >= float(row.max()) - 1e-5 for lp, row in zip(gen.logprobs, logp))
    scored = backend.score(prompt, gen.text)
    if scored.token_ids == gen.token_ids:        # same tokenisation: score must agree exactly
        np.testing.assert_allclose(scored.logprobs, gen.logprobs, atol=1e-4)
    assert len(scored.logprobs) == len(scored.token_ids) == len(scored.entropies)


def test_attention_is_one_value_per_generated_token(backend):
    before = backend.model.config._attn_implementation
    gen = backend.generate("Question: Who wrote Hamlet?\nAnswer:", max_new_tokens=5,
                           want_attention=True)
    assert len(gen.attention) == len(gen.token_ids)
    assert all(0.0 <= a <= 1.0 for a in gen.attention)
    # the first token receives the full attention of the first query (causal softmax)
    assert gen.attention[0] == pytest.approx(1.0)
    assert backend.model.config._attn_implementation == before   # eager only for that pass


def test_cached_backend_returns_identical_results_and_counts_hits(backend, tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    cached = CachedBackend(backend, tmp_path)
    args = dict(k=2, max_new_tokens=4, stop=STOP, seed=3, layer=5)
    first = cached.sample(PROMPT, Sampling(**args))
    again = cached.sample(PROMPT, Sampling(**args))
    assert (cached.calls, cached.hits, cached.misses) == (2, 1, 1)
    # the cache keeps the Gram factor (cache.vectors: gram): a hit gives stand-in vectors of the
    # same shape whose U is the fresh one's
    from seakr_repro.uncertainty import eigen_score
    assert again.vectors.shape == first.vectors.shape and again.vectors.dtype == np.float32
    assert getattr(again, "vectors_form", None) == "gram"
    assert eigen_score(again.vectors) == pytest.approx(eigen_score(first.vectors), abs=1e-5)
    assert [g.token_ids for g in first.samples] == [g.token_ids for g in again.samples]
    assert [g.logprobs for g in first.samples] == [g.logprobs for g in again.samples]
    g1 = cached.generate(PROMPT, max_new_tokens=4, stop=STOP, want_stats=True)
    g2 = cached.generate(PROMPT, max_new_tokens=4, stop=STOP, want_stats=True)
    assert g1 == g2 and cached.hits == 2
    cached.sample(PROMPT, Sampling(**{**args, "seed": 4}))          # another seed is another entry
    assert cached.misses == 3
    assert cached.stats()["prompt_tokens"] == 5 * backend.count_tokens(PROMPT)


def test_chunked_rows_give_the_same_vectors_as_a_full_forward(backend):
    from seakr_repro.llm.hf.backend import HFBackend
    chunked = HFBackend(backend.model, backend.tokenizer, backend.name, max_batch_rows=2)
    s = chunked.sample(PROMPT, Sampling(seed=11, layer=14, hook="mlp_out", **SAMPLE_ARGS))
    assert len(s.samples) == s.vectors.shape[0] == SAMPLE_ARGS["k"]
    for gen, vec in zip(s.samples, s.vectors):
        np.testing.assert_allclose(vec, _reference_vectors(backend, gen.token_ids, 14)[0],
                                   rtol=1e-4, atol=1e-4)


def test_step02_vectors_at_every_layer_are_the_defined_ones(backend, samples):
    """`llm.hooks`' definitions at every layer, against an independent full forward: mlp_out is
    the MLP's output, residual is `hidden_states[l + 1]`, and at the last layer the stream
    BEFORE the final norm (transformers' `hidden_states[-1]` is its norm, a different scale)."""
    comps = [g.token_ids for g in samples[(14, "mlp_out")].samples]
    got = backend.eos_vectors_all_layers(PROMPT, comps)
    n = backend.n_layers
    assert got["mlp_out"].shape == got["residual"].shape == (n, len(comps), backend.hidden_size)
    for i, c in enumerate(comps):
        ids = backend._encode(PROMPT) + list(c) + [backend.eos_token_id]
        box: dict = {}
        handles = [layer.mlp.register_forward_hook(lambda m, a, o, at=at, box=box: box.__setitem__(at, o))
                   for at, layer in enumerate(backend.model.model.layers)]
        try:
            with torch.inference_mode():
                out = backend.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        finally:
            for h in handles:
                h.remove()
        hs = [h[0, -1].float().numpy() for h in out.hidden_states]
        for at in range(n):
            np.testing.assert_allclose(got["mlp_out"][at, i], box[at][0, -1].float().numpy(),
                                       rtol=1e-4, atol=1e-4, err_msg=f"mlp_out {at}")
            if at < n - 1:
                np.testing.assert_allclose(got["residual"][at, i], hs[at + 1], rtol=1e-4,
                                           atol=1e-4, err_msg=f"residual {at}")
        last = torch.from_numpy(got["residual"][n - 1, i])
        with torch.inference_mode():
            normed = backend.model.model.norm(last[None])[0].numpy()
        np.testing.assert_allclose(normed, hs[n], rtol=1e-4, atol=1e-4)
        assert np.abs(last.numpy()).max() > 3 * np.abs(hs[n]).max()    # not the normed one
