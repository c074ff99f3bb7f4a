"""The out-of-memory retry lowers the peak it ran out of, shown in bytes on a simulated card
(doubles/simulated_card.py) at every decode path that runs on a CPU: a cap the uncapped call goes
over makes the call run out of memory; the retry (fewer rows per pass, the other rows' suffix
caches in host memory, the sampler's warping by rows) then stays under the cap, with the uncapped
call's tokens, statistics and vectors bit for bit. (The graph path is the static step captured on
CUDA: tests/test_gpu.py.)"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from seakr_repro.doubles.llama_tokenizer import build_tokenizer
from seakr_repro.doubles.random_llama import random_llama
from seakr_repro.doubles.simulated_card import SimulatedCard
from seakr_repro.llm.hf import host_memory
from seakr_repro.llm.hf.backend import HFBackend
from seakr_repro.core.setting_choices import DECODE_PATHS
from seakr_repro.llm.hf.decode.one_sync import DynamicRows
from seakr_repro.llm.hf.decode.static import suffix_bytes
from seakr_repro.llm.sampling_settings import Sampling

PROMPT = "Question: Who was born first, Aristotle or Plato?\nAnswer: Plato was born in 428 BC and"
ARGS = dict(k=8, max_new_tokens=24, seed=5, want_stats=True, layer=1)
CPU_PATHS = [p for p in DECODE_PATHS if p != "graph"]


@pytest.fixture(scope="module")
def model_tok(tmp_path_factory):
    """A 4-layer LLaMA whose rows' keys and values, not its 900-token vocabulary, grow with k."""
    tok = build_tokenizer(tmp_path_factory.mktemp("tok"))
    return random_llama("small", tok, "cpu", torch.float32, seed=0), tok


def _sample(be):
    return be.sample(PROMPT, Sampling(**ARGS))


def _call(model, tok, path: str, cap_beyond_weights: int | None = None, rows: int | None = None, fn=_sample):
    """(result, peak bytes beyond the weights, backend) of fn(backend) on a fresh simulated card."""
    card = SimulatedCard()
    with card:
        weights = card.hold(model)
        be = HFBackend(model, tok, "m", prefix_cache_tokens=0, decode=path)
        be.rows_per_forward = rows
        card.cap = None if cap_beyond_weights is None else weights + cap_beyond_weights
        card.reset_peak()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = fn(be)
    return got, card.peak - weights, be


def _stats(g) -> list[float]:
    return g.logprobs + g.entropies + g.logsumexp + g.warped_logprobs


def _same(got, want) -> None:
    """The same tokens; statistics and vectors to float rounding (a pass of fewer rows may round a
    matrix product differently: the retry's own promise, before any memory was moved)."""
    assert len(got.samples) == len(want.samples)
    for g, w in zip(got.samples, want.samples):
        assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
        assert np.allclose(_stats(g), _stats(w), rtol=0, atol=1e-5)
    assert np.abs(got.vectors - want.vectors).max() <= 1e-5 * np.abs(want.vectors).max()


@pytest.mark.parametrize("path", CPU_PATHS)
def test_the_retry_runs_under_a_cap_the_uncapped_call_goes_over(model_tok, path):
    model, tok = model_tok
    want, need, _ = _call(model, tok, path)
    one_row, floor, _ = _call(model, tok, path, rows=1)
    _same(one_row, want)
    # what grows with k (the rows' suffix caches, the passes' and the sampler's transients) is
    # held one part at a time: a call of one row per pass needs well under half the uncapped peak
    assert floor < 0.5 * need, (floor, need)
    cap = (floor + need) // 2
    got, peak, be = _call(model, tok, path, cap_beyond_weights=cap)
    assert be.stats()["oom_retries"] >= 1 and be.rows_per_forward < ARGS["k"]
    assert peak <= cap < need
    _same(got, want)


def test_a_step_of_several_contexts_retries_under_its_cap_with_the_same_results(model_tok):
    """SeaKR's call (a greedy row beside k samples, two contexts in one batch, as the paper profile's
    max_batch_contexts 2): the contexts are split first, then the rows."""
    model, tok = model_tok
    prompts = [PROMPT, "Question: Where did Abraham Lincoln die?\nAnswer: Lincoln died in"]

    def step(be):
        return be.generate_and_sample_many(prompts, generate=dict(max_new_tokens=16, want_stats=True),
                                           sample=Sampling(**ARGS))
    want, need, _ = _call(model, tok, "one_sync", fn=step)
    got, peak, be = _call(model, tok, "one_sync", cap_beyond_weights=int(0.45 * need), fn=step)
    assert be.contexts_per_batch == 1 and be.rows_per_forward < ARGS["k"] and peak <= 0.45 * need
    for (g, ss), (wg, wss) in zip(got, want):
        assert g.token_ids == wg.token_ids and np.allclose(g.logprobs, wg.logprobs, rtol=0, atol=1e-5)
        _same(ss, wss)


def test_rows_moved_off_the_card_are_no_longer_counted_and_come_back_the_same():
    x = torch.randn(1000)
    card = SimulatedCard()
    with card:
        host = host_memory.host_zeros(1000, like=x)
        on = x.clone()
        assert card.allocated == 4096 and host_memory.separate("cpu")
        host_memory.to_host(host, on)
        del on
        assert card.allocated == 0
        back = host_memory.to_card(host, "cpu")
        assert card.allocated == 4096 and torch.equal(back, x)
    assert not host_memory.separate("cpu")          # a plain CPU: one memory, nothing moves
    assert host_memory.to_card(x, "cpu") is x


def test_each_step_moves_its_new_slot_to_the_host_and_only_waiting_parts_slots_back(model_tok, monkeypatch):
    """Two rows per pass (four parts) on a simulated card: each decode step copies to the host one
    token's keys and values per live row, not the whole cache, and to the card the slots written so
    far of every part but the one still there from the step before (host_memory.step_copies)."""
    model, tok = model_tok
    cfg = model.config
    slot = suffix_bytes(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, 1,
                        cfg.hidden_size // cfg.num_attention_heads, model.dtype.itemsize)
    steps = []          # per decode step: [bytes to the card, bytes to the host, (cache, rows) per pass]
    to_card, to_host, next_logits = host_memory.to_card, host_memory.to_host, DynamicRows.next_logits

    def count_to_card(t, device):
        steps[-1][0] += t.nbytes
        return to_card(t, device)

    def count_to_host(host, t):
        steps[-1][1] += t.numel() * t.element_size()
        to_host(host, t)

    def step(self, *args):
        steps.append([0, 0, []])
        return next_logits(self, *args)

    def sample(be):
        forward = be.forward

        def counted(ids, cache=None, position_ids=None):
            if steps:
                steps[-1][2].append((id(cache), ids.shape[0]))
            return forward(ids, cache, position_ids)
        be.forward = counted
        return _sample(be)

    monkeypatch.setattr(host_memory, "to_card", count_to_card)
    monkeypatch.setattr(host_memory, "to_host", count_to_host)
    monkeypatch.setattr(DynamicRows, "next_logits", step)
    _call(model, tok, "one_sync", rows=2, fn=sample)
    assert len(steps) >= ARGS["max_new_tokens"] // 2 and max(len(s[2]) for s in steps) == 4
    last = None
    for s, (card_bytes, host_bytes, passes) in enumerate(steps):
        rows = [n for _, n in passes]
        first_there = passes[0][0] == last
        assert (card_bytes, host_bytes) == host_memory.step_copies(slot, rows if first_there else [0] + rows, s)
        last = passes[-1][0]


@pytest.mark.parametrize("path", CPU_PATHS)
def test_rows_waiting_in_host_memory_change_no_bit(model_tok, path):
    """The same passes (two rows each) with the waiting parts' rows in host memory (a simulated
    card) and kept on the card (none): the same tokens, statistics and vectors, bit for bit."""
    model, tok = model_tok
    got, _, _ = _call(model, tok, path, rows=2)
    kept = HFBackend(model, tok, "m", prefix_cache_tokens=0, decode=path)
    kept.rows_per_forward = 2
    want = _sample(kept)
    for g, w in zip(got.samples, want.samples):
        assert (g.token_ids, _stats(g)) == (w.token_ids, _stats(w))
    assert np.array_equal(got.vectors, want.vectors)
