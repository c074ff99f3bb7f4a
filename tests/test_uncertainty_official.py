"""The official estimators (perplexity and "LN-entropy" as the authors' engine computes them),
the warped log-probs both backends return, and the vLLM backend's forced-EOS plumbing (run with a
scripted engine: vLLM is not needed)."""
from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seakr_repro.llm.base import Generation
from seakr_repro.llm.sampling import sample_tokens, warp_logits, warped_logsumexp
from seakr_repro.uncertainty import registry
from seakr_repro.llm.sampling_settings import Sampling

LP = [math.log(0.5), math.log(0.25), math.log(0.125)]


def _official(name, greedy=None, samples=()):
    stats = registry.ContextStats(
        greedy=registry.greedy_stats(greedy, 2) if greedy else None,
        samples=[registry.sample_stats(g, 2) for g in samples])
    return registry.score(name, stats, {"alpha": 1e-3, "variant": "seakr"})


def test_official_perplexity_drops_the_last_token():
    # a ". " stop completed by the third token: the engine's list is t1 t2 EOS, perplexity over t1 t2
    g = Generation("a b", token_ids=[5, 6], logprobs=LP[:2], finish_reason="stop",
                   all_token_ids=[5, 6, 7], all_logprobs=LP)
    assert _official("perplexity_official", g) == pytest.approx(math.exp(-(LP[0] + LP[1]) / 2))
    # a sampled EOS: t1 t2 EOS, the same two tokens count
    e = Generation("a b", token_ids=[5, 6], logprobs=LP[:2], finish_reason="eos",
                   all_token_ids=[5, 6], all_logprobs=LP[:2])
    assert _official("perplexity_official", e) == pytest.approx(math.exp(-(LP[0] + LP[1]) / 2))
    # the true perplexity reads the returned text's tokens
    assert _official("perplexity", g) == pytest.approx(math.exp(-(LP[0] + LP[1]) / 2))


def test_official_perplexity_is_1e3_under_two_tokens():
    one = Generation("", token_ids=[], logprobs=[], finish_reason="stop", all_token_ids=[7],
                     all_logprobs=[LP[0]])
    assert _official("perplexity_official", one) == 1e3
    # one token then a sampled EOS is two output tokens: perplexity of the first
    eos = Generation("a", token_ids=[5], logprobs=[LP[0]], finish_reason="eos",
                     all_token_ids=[5], all_logprobs=[LP[0]])
    assert _official("perplexity_official", eos) == pytest.approx(2.0)


def test_official_ln_entropy_averages_warped_perplexities_including_empty_text():
    warped = [math.log(0.8), math.log(0.4), math.log(0.9)]
    full = Generation("a b", token_ids=[5, 6], logprobs=LP[:2], finish_reason="stop",
                      all_token_ids=[5, 6, 7], all_logprobs=LP, warped_logprobs=warped)
    # empty text (the stop came first) but 2 output tokens: the engine still counts it
    empty = Generation("", token_ids=[], logprobs=[], finish_reason="stop",
                       all_token_ids=[8, 9], all_logprobs=LP[:2], warped_logprobs=warped[:2])
    short = Generation("", token_ids=[], logprobs=[], finish_reason="stop",
                       all_token_ids=[8], all_logprobs=LP[:1], warped_logprobs=warped[:1])
    ppl_full = math.exp(-(warped[0] + warped[1]) / 2)
    ppl_empty = math.exp(-warped[0])
    assert _official("ln_entropy_official", samples=[full, empty, short]) == \
        pytest.approx((ppl_full + ppl_empty) / 2)
    assert _official("ln_entropy_official", samples=[short]) == 1e3
    # the true LN-entropy: raw log-probs of the non-empty samples' text
    assert _official("ln_entropy", samples=[full, empty, short]) == pytest.approx(-(LP[0] + LP[1]) / 2)
    with pytest.raises(Exception, match="warped"):
        _official("ln_entropy_official", samples=[Generation("a b", token_ids=[5, 6], logprobs=LP[:2])])


def test_sample_tokens_reports_the_log_prob_of_the_distribution_it_drew_from():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 40) * 3
    ids, lp = sample_tokens(logits, 0.7, 5, 0.8, g)
    ref = torch.log_softmax(warp_logits(logits, 0.7, 5, 0.8), -1).gather(1, ids[:, None])[:, 0]
    assert torch.equal(lp, ref) and torch.isfinite(lp).all()
    # the vLLM worker's route: raw log-prob + raw logsumexp, / T, minus the warped logsumexp
    from seakr_repro.llm.vllm.backend import warped_logprobs
    raw = torch.log_softmax(logits, -1).gather(1, ids[:, None])[:, 0]
    stats = [(0.0, float(torch.logsumexp(logits[i], -1)), float(warped_logsumexp(logits[i][None], 0.7, 5, 0.8)[0]))
             for i in range(6)]
    np.testing.assert_allclose(warped_logprobs(raw.tolist(), stats, 0.7), lp.numpy(), atol=1e-5)
    greedy_ids, greedy_lp = sample_tokens(logits, 0.0, 50, 0.9)
    assert torch.equal(greedy_ids, logits.argmax(-1))
    assert torch.equal(greedy_lp, torch.log_softmax(logits, -1).gather(1, greedy_ids[:, None])[:, 0])


def test_hf_samples_carry_warped_log_probs_from_the_sampler():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir
    torch.set_num_threads(1)
    b = HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")
    prompt = "Question: Who wrote Hamlet?\nAnswer:"
    ss = b.sample(prompt, Sampling(k=2, max_new_tokens=5, stop=[], temperature=1.0, top_k=50, top_p=0.9, seed=3))
    for g in ss.samples:
        ids = b._encode(prompt) + g.all_token_ids
        with torch.inference_mode():
            logits = b.model(input_ids=torch.tensor([ids])).logits[0, -len(g.all_token_ids) - 1:-1].float()
        tgt = torch.tensor(g.all_token_ids)[:, None]
        ref = torch.log_softmax(warp_logits(logits, 1.0, 50, 0.9), -1).gather(1, tgt)[:, 0]
        np.testing.assert_allclose(g.warped_logprobs, ref.numpy(), atol=1e-4)
        raw = torch.log_softmax(logits, -1).gather(1, tgt)[:, 0]
        np.testing.assert_allclose(g.all_logprobs, raw.numpy(), atol=1e-4)
        assert all(w >= r - 1e-5 for w, r in zip(g.warped_logprobs, g.all_logprobs))   # renormalised


# ------------------------------------------------------------------ vLLM plumbing, no vLLM
class _Engine:
    """Scripted `EngineThread.run`: samples get fixed outputs, forced-EOS requests a vector that
    encodes their length, and every request is recorded."""

    def __init__(self, outputs):
        self.outputs, self.requests = outputs, []

    def run(self, reqs, params, tags, score=None):
        self.requests.append([r["prompt_token_ids"] for r in reqs])
        out = []
        for r, p in zip(reqs, params):
            spec = p["extra_args"]["seakr"]
            if "vec" in spec:
                out.append((None, {"vec": [float(len(r["prompt_token_ids"]))] * 4}))
            else:
                out.append(self.outputs.pop(0))
        return out


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from seakr_repro.llm.registry import model_dir
    return AutoTokenizer.from_pretrained(model_dir("smollm2-135m-instruct"))


def _vllm_backend(tokenizer, engine, monkeypatch):
    from seakr_repro.llm.vllm.backend import VLLMBackend
    b = object.__new__(VLLMBackend)
    b.tokenizer, b.name, b.eos_token_id = tokenizer, "smol", 2
    b.n_layers, b.hidden_size, b.max_model_len = 30, 4, 8192
    b.max_context = b.max_model_len
    b._engine, b._installed, b._install_lock = engine, set(), threading.Lock()
    monkeypatch.setattr(VLLMBackend, "_install", lambda self, what: None)
    monkeypatch.setattr(VLLMBackend, "_params", staticmethod(lambda **kw: kw))
    return b


def _output(ids, finish, stop_reason=None, lps=None, warped_logsumexp=0.0):
    lps = lps or [-0.5] * len(ids)
    out = SimpleNamespace(token_ids=ids, logprobs=[{t: SimpleNamespace(logprob=lp)} for t, lp in zip(ids, lps)],
                          finish_reason=finish, stop_reason=stop_reason)
    return SimpleNamespace(outputs=[out]), {"stats": [(1.0, 3.0, warped_logsumexp)] * len(ids)}


def test_vllm_a_dot_space_stop_keeps_the_period_before_eos(tokenizer, monkeypatch):
    ids = tokenizer("He was born in 1959. Ivania", add_special_tokens=False)["input_ids"]
    stop_at = [tokenizer.decode(ids[:i]) for i in range(1, len(ids) + 1)].index("He was born in 1959. I") + 1
    # vLLM reports every token it generated; the one that completed ". " is the last
    eng = _Engine([_output(ids[:stop_at], "stop", ". "), _output(ids[:stop_at], "stop", ". ")])
    b = _vllm_backend(tokenizer, eng, monkeypatch)
    ss = b.sample("Q:", Sampling(k=2, max_new_tokens=20, stop=[". "], forced_eos="replace_last"))
    g = ss.samples[0]
    assert g.text == "He was born in 1959" and tokenizer.decode(g.all_token_ids).endswith("1959. I")
    p = b._encode("Q:")
    sent = eng.requests[1]                      # the forced-EOS requests
    assert sent == [p + ids[:stop_at - 1] + [2]]          # the period stays, " I" became EOS
    assert tokenizer.decode(sent[0][len(p):-1]).endswith("1959.")
    assert ss.vectors.shape == (2, 4) and ss.vectors[0, 0] == len(sent[0])
    # warped log-prob = (raw + raw logsumexp) / T - warped logsumexp = -0.5 + 3 - 0
    assert g.warped_logprobs == pytest.approx([2.5] * stop_at)


def test_vllm_at_max_tokens_the_last_token_is_replaced_and_a_sampled_eos_used(tokenizer, monkeypatch):
    eng = _Engine([_output([11, 12, 13, 14], "length"), _output([11, 12, 2], "stop", 2)])
    b = _vllm_backend(tokenizer, eng, monkeypatch)
    ss = b.sample("Q:", Sampling(k=2, max_new_tokens=4, stop=[], forced_eos="replace_last"))
    p = b._encode("Q:")
    assert sorted(eng.requests[1]) == sorted([p + [11, 12, 13, 2], p + [11, 12, 2]])
    assert ss.samples[1].finish_reason == "eos" and ss.samples[1].all_token_ids == [11, 12]
    eng2 = _Engine([_output([11, 12, 13, 14], "length")])
    _vllm_backend(tokenizer, eng2, monkeypatch).sample("Q:", Sampling(k=1, max_new_tokens=4, stop=[],
                                                       forced_eos="append"))
    assert eng2.requests[1] == [p + [11, 12, 13, 14, 2]]


def test_vllm_stops_where_our_decoding_finds_the_stop(tokenizer, monkeypatch):
    ids = tokenizer("He was born in 1959. Ivania was", add_special_tokens=False)["input_ids"]
    # the engine ran on past the stop (it did not see it): the uncut ids end where it would have
    eng = _Engine([_output(ids, "length")])
    b = _vllm_backend(tokenizer, eng, monkeypatch)
    g = b.sample("Q:", Sampling(k=1, max_new_tokens=30, stop=[". "], forced_eos="replace_last")).samples[0]
    assert g.finish_reason == "stop" and tokenizer.decode(g.all_token_ids).endswith("1959. I")
