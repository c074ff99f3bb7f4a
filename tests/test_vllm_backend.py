"""The vLLM backend against the transformers backend, on the real default model (SmolLM2-135M).

Runs where vLLM imports (`make test-vllm`, which uses .venv-vllm from `make setup-vllm`); skipped
elsewhere with the reason. Both backends run float32 on the same weights, so on the SAME samples
(vLLM's own, re-encoded by the transformers backend) the forced-EOS vectors, SeaKR's eigen score,
the greedy continuation and the teacher-forced log-probabilities must agree to float tolerance.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from seakr_repro.llm.vllm.backend import vllm_available
from seakr_repro.llm.sampling_settings import Sampling

WHY = vllm_available()
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(WHY is not None, reason=f"vLLM is not installed here ({WHY}); "
                                 "`make setup-vllm` then `make test-vllm` runs these tests")]

PROMPT = ("Question: What is the capital of France?\nAnswer: Paris is the capital of France. "
          "So the answer is Paris.\n\nQuestion: Who wrote Hamlet?\nAnswer:")
PROMPT2 = ("Question: Who painted the Mona Lisa?\nAnswer: Leonardo da Vinci painted it. So the "
           "answer is Leonardo da Vinci.\n\nQuestion: What is the largest planet?\nAnswer:")
STOP = ["\n\n", "\nQuestion:", ". "]
ARGS = dict(k=6, max_new_tokens=12, stop=STOP, temperature=1.0, top_k=50, top_p=0.9)


@pytest.fixture(scope="module")
def pair():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir
    from seakr_repro.llm.vllm.backend import VLLMBackend
    # no torch.set_num_threads here: vLLM's CPU attention checks the thread count it started with
    d = model_dir("smollm2-135m-instruct")
    return (VLLMBackend.from_dir(d, name="smollm2-135m-instruct", cpu_kv_cache_gib=1),
            HFBackend.from_dir(d, name="smollm2-135m-instruct"))


def _hf_vectors(hf, prompt, samples, layer, hook):
    cache, _ = hf.prefill(hf._encode(prompt))
    return hf.eos_vectors(cache, [g.token_ids for g in samples], layer, hook)


def _rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


@pytest.mark.parametrize("layer,hook", [(None, "mlp_out"), (3, "residual"), (20, "mlp_out")])
def testeos_vectors_and_eigen_scores_match_transformers(pair, layer, hook):
    from seakr_repro.uncertainty.eigenscore import eigen_score
    v, hf = pair
    ss = v.sample(PROMPT, Sampling(seed=3, layer=layer, hook=hook, **ARGS))
    assert ss.vectors.shape == (ARGS["k"], v.hidden_size) and ss.layer == (14 if layer is None else layer)
    ref = _hf_vectors(hf, PROMPT, ss.samples, ss.layer, hook)
    assert _rel(ss.vectors, ref) < 1e-4
    for variant in ("seakr", "inside"):
        assert eigen_score(ss.vectors, variant=variant) == pytest.approx(
            eigen_score(ref, variant=variant), abs=1e-3)
    # the uncertainty SeaKR uses (non-empty samples only) agrees as well
    keep = [i for i, g in enumerate(ss.samples) if g.text.strip()]
    if len(keep) >= 2:
        assert eigen_score(ss.nonempty_vectors) == pytest.approx(eigen_score(ref[keep]), abs=1e-3)


def test_samples_are_cut_like_the_transformers_backend_and_reproducible(pair):
    v, hf = pair
    a = v.sample(PROMPT, Sampling(seed=11, want_stats=True, **ARGS))
    b = v.sample(PROMPT, Sampling(seed=11, want_stats=True, **ARGS))
    assert [g.token_ids for g in a.samples] == [g.token_ids for g in b.samples]
    for g in a.samples:
        assert not any(s in g.text for s in STOP)
        assert g.text == hf._decode(g.token_ids) or g.finish_reason == "stop"
        assert len(g.logprobs) == len(g.token_ids) == len(g.entropies) == len(g.logsumexp)
        assert g.finish_reason in ("stop", "eos", "length")
        # teacher-forced scores of the same tokens: the sampled tokens' raw log-probabilities
        if g.token_ids:
            ref = hf.score(PROMPT, hf._decode(g.token_ids))
            if ref.token_ids == g.token_ids:     # the text re-encodes to the same tokens
                np.testing.assert_allclose(g.logprobs, ref.logprobs, atol=1e-3)
                np.testing.assert_allclose(g.entropies, ref.entropies, atol=1e-3)
    c = v.sample(PROMPT, Sampling(seed=12, **ARGS))
    assert [g.token_ids for g in c.samples] != [g.token_ids for g in a.samples]


def test_greedy_generation_and_scores_match_transformers(pair):
    v, hf = pair
    for stop in (STOP, ()):
        a = v.generate(PROMPT, max_new_tokens=16, stop=stop, want_stats=True)
        b = hf.generate(PROMPT, max_new_tokens=16, stop=stop, want_stats=True)
        assert (a.text, a.token_ids, a.finish_reason) == (b.text, b.token_ids, b.finish_reason)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-3)
        np.testing.assert_allclose(a.entropies, b.entropies, atol=1e-3)
        np.testing.assert_allclose(a.logsumexp, b.logsumexp, atol=1e-3)
    a, b = v.score(PROMPT, " William Shakespeare"), hf.score(PROMPT, " William Shakespeare")
    assert a.token_ids == b.token_ids
    for field in ("logprobs", "entropies", "logsumexp"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), atol=1e-3)
    # twice: the second call must not lose positions to the prefix cache
    np.testing.assert_allclose(v.score(PROMPT, " William Shakespeare").logprobs, a.logprobs, atol=1e-6)


def test_greedy_tokens_are_the_same_with_or_without_statistics(pair, tmp_path):
    """Statistics come from a hook on the logits: asking for them changes no token, greedy or
    sampled, alone or beside a call without them in one batch. The call cache still keeps the two
    kinds of call apart on vLLM (its greedy tokens can depend on the batch), so neither replaces
    the entry the other stored."""
    from concurrent.futures import ThreadPoolExecutor

    from seakr_repro.llm.cache import CachedBackend, has_stats
    v, _ = pair
    kw = dict(max_new_tokens=16, stop=STOP)
    plain = [v.generate(p, **kw) for p in (PROMPT, PROMPT2)]
    stats = [v.generate(p, want_stats=True, **kw) for p in (PROMPT, PROMPT2)]
    with ThreadPoolExecutor(2) as pool:        # side by side: one batch, one call of each kind
        mixed = list(pool.map(lambda i: v.generate((PROMPT, PROMPT2)[i], want_stats=bool(i), **kw), (0, 1)))
    for got in (stats, mixed):
        assert [g.token_ids for g in got] == [g.token_ids for g in plain]
        np.testing.assert_allclose(got[0].logprobs, plain[0].logprobs, atol=1e-5)
    s_plain, s_stats = (v.sample(PROMPT, Sampling(seed=5, want_stats=w, **ARGS)) for w in (False, True))
    assert [g.token_ids for g in s_stats.samples] == [g.token_ids for g in s_plain.samples]
    cached = CachedBackend(v, tmp_path)
    first = cached.generate(PROMPT, **kw)
    assert has_stats(cached.generate(PROMPT, want_stats=True, **kw)) and cached.misses == 2
    assert cached.generate(PROMPT, **kw) == first and cached.hits == 1


def test_read_logprobs_matches_transformers(pair):
    """Self-RAG's reads: the log-prob of chosen tokens at chosen positions of a continuation given
    as ids (here the greedy one; the reads include tokens it did not generate), as transformers
    computes them; twice, so the prefix cache loses no position."""
    v, hf = pair
    g = hf.generate(PROMPT, max_new_tokens=8, stop=())
    ids = list(g.token_ids)
    reads = [(0, ids[0]), (3, ids[3]), (3, ids[0]), (len(ids) - 1, ids[-1]), (len(ids), hf.eos_token_id)]
    a, b = v.read_logprobs(PROMPT, ids, reads), hf.read_logprobs(PROMPT, ids, reads)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-3)
    np.testing.assert_allclose(b.logprobs[0], g.logprobs[0], atol=1e-4)    # the generated token's own
    np.testing.assert_allclose(v.read_logprobs(PROMPT, ids, reads).logprobs, a.logprobs, atol=1e-6)


def test_sample_many_batches_contexts_and_keeps_them_apart(pair):
    v, hf = pair
    sets = v.sample_many([PROMPT, PROMPT2], Sampling(seed=5, **ARGS))
    assert len(sets) == 2
    for prompt, ss in zip([PROMPT, PROMPT2], sets):
        assert all(g.n_prompt_tokens == v.count_tokens(prompt) for g in ss.samples)
        assert _rel(ss.vectors, _hf_vectors(hf, prompt, ss.samples, ss.layer, ss.hook)) < 1e-4


def test_concurrent_callers_share_the_engine(pair):
    """Calls from several threads join one running batch and each gets its own answer."""
    v, _ = pair
    prompts = [PROMPT, PROMPT2, PROMPT + " The", PROMPT2 + " It"]
    alone = [v.generate(p, max_new_tokens=10, stop=STOP, want_stats=True) for p in prompts]
    together: dict[int, object] = {}

    def work(i):
        together[i] = v.generate(prompts[i], max_new_tokens=10, stop=STOP, want_stats=True)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, g in enumerate(alone):
        assert together[i].token_ids == g.token_ids
        np.testing.assert_allclose(together[i].entropies, g.entropies, atol=1e-3)


def test_dragin_attention_matches_transformers(pair):
    """DRAGIN's per-token attention (last layer, generated tokens alone, max over queries, mean
    over heads): vLLM returns no weights, the backend recomputes them from q and k."""
    v, hf = pair
    a = v.generate(PROMPT, max_new_tokens=12, want_attention=True, want_stats=True)
    b = hf.generate(PROMPT, max_new_tokens=12, want_attention=True, want_stats=True)
    assert a.token_ids == b.token_ids and len(a.attention) == len(a.token_ids)
    np.testing.assert_allclose(a.attention, b.attention, atol=1e-4)


def test_all_layer_vectors_match_transformers_step_02(pair):
    from seakr_repro.steps.extraction import eos_vectors_all_layers
    v, hf = pair
    ss = v.sample(PROMPT, Sampling(seed=9, **ARGS))
    comps = [g.token_ids for g in ss.samples]
    got = eos_vectors_all_layers(v, PROMPT, comps)
    ref = eos_vectors_all_layers(hf, PROMPT, comps)
    for hook in ("mlp_out", "residual"):
        assert got[hook].shape == ref[hook].shape == (v.n_layers, len(comps), v.hidden_size)
        for layer in range(v.n_layers):           # every layer: `llm.hooks` defines them all
            assert _rel(got[hook][layer], ref[hook][layer]) < 1e-4, (hook, layer)
    assert _rel(got["mlp_out"][ss.layer], ss.vectors) < 1e-5
    # the methods' single-layer capture gives the same last-layer residual (before the final norm)
    top = v.sample(PROMPT, Sampling(seed=9, layer=v.n_layers - 1, hook="residual", **ARGS))
    assert [g.token_ids for g in top.samples] == comps
    assert _rel(got["residual"][-1], top.vectors) < 1e-5


def test_overlong_prompts_give_a_clear_error(pair):
    from seakr_repro.core.errors import UserError
    v, _ = pair
    with pytest.raises(UserError, match="max_model_len"):
        v.generate("word " * (v.max_model_len + 10), max_new_tokens=4)
    # the engine keeps working after a refused call
    assert v.generate(PROMPT, max_new_tokens=4).token_ids


def test_k_samples_share_the_prompt_blocks(pair):
    """Prefix caching, not recomputation: for k samples of a new context the model computes the
    new prompt tokens once, plus per sample at most one partial KV block, its decoded tokens and
    its forced-EOS request. Counted in rows through the first layer (no timing)."""
    v, _ = pair
    assert v.llm.llm_engine.vllm_config.cache_config.block_size == 32   # CPU: small partial blocks

    def install(worker):
        worker._rows = [0]
        layer = worker.model_runner.model.model.layers[0]
        layer.register_forward_hook(lambda m, i, o: worker._rows.__setitem__(
            0, worker._rows[0] + (o[0] if isinstance(o, tuple) else o).shape[0]))

    def take(worker):
        n, worker._rows[0] = worker._rows[0], 0
        return n

    v._engine.call(install)
    prompt = PROMPT2 + " " + " ".join(f"Note {i}: the planet count is eight." for i in range(40))
    n_prompt, k, new = v.count_tokens(prompt), 8, 6
    ss = v.sample(prompt, Sampling(k=k, max_new_tokens=new, stop=[], seed=1))
    rows = v._engine.call(take)[0]
    generated = sum(len(g.token_ids) for g in ss.samples)
    bound = n_prompt + k * (32 + new + 32 + 1) + generated
    assert rows <= bound, (rows, bound)
    assert rows < 2 * n_prompt            # recomputing the prompt per sample would be k times it
