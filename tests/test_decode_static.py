"""The `static` decode path (the step the `graph` path captures as a CUDA graph), run eagerly on
the CPU against the default path (one_sync) at float32: the same tokens, statistics within 1e-5,
the same forced-EOS vectors; rows that end early (EOS, stop strings) stay in the batch as padding
and draw nothing; no host synchronisation inside the step; the step's buffers keep their
addresses. A tiny random LLaMA whose EOS is made likely, so rows end at different steps."""
from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from host_sync_guard import HostSync, NoHostSync
from seakr_repro.core.errors import UserError
from seakr_repro.doubles.llama_tokenizer import EOS, build_tokenizer
from seakr_repro.doubles.random_llama import random_llama
from seakr_repro.llm.hf.backend import HFBackend
from seakr_repro.llm.hf.decode import static as static_path
from seakr_repro.llm.hf.decode.base import slots_for
from seakr_repro.llm.sampling_settings import Sampling

PROMPTS = ["Question: Who was born first, Aristotle or Plato?\nAnswer:",
           "Question: Where did Abraham Lincoln die?\nAnswer: Lincoln died in",
           "Who painted the Mona Lisa?"]
STOP = ["."]
SAMPLE = dict(k=6, max_new_tokens=12, stop=STOP, seed=3, want_stats=True)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tok = build_tokenizer(tmp_path_factory.mktemp("tok"))
    model = random_llama("tiny", tok, "cpu", torch.float32, seed=0)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 4        # EOS likely: rows end at different steps
    return HFBackend(model, tok, "default"), HFBackend(model, tok, "static", decode="static")


def _stats(g) -> list[float]:
    return g.logprobs + (g.entropies or []) + (g.logsumexp or []) + (g.warped_logprobs or [])


def _same(got, want) -> None:
    """Same tokens, texts and finish reasons; statistics within 1e-5."""
    assert (got.token_ids, got.text, got.finish_reason, got.all_token_ids) == \
        (want.token_ids, want.text, want.finish_reason, want.all_token_ids)
    a, b = _stats(got), _stats(want)
    assert len(a) == len(b) and np.allclose(a, b, rtol=0, atol=1e-5)


def _same_sets(got, want) -> None:
    assert len(got.samples) == len(want.samples)
    for g, w in zip(got.samples, want.samples):
        _same(g, w)
    np.testing.assert_array_equal(got.vectors, want.vectors)   # the EOS pass is not a decode step


def _ended_at_different_steps(sets) -> None:
    """Padding rows were exercised: rows ended by EOS and by a stop string while others went on."""
    samples = [s for ss in sets for s in ss.samples]
    reasons = collections.Counter(s.finish_reason for s in samples)
    assert reasons["eos"] and reasons["stop"] and reasons["length"], reasons
    assert len({len(s.all_token_ids) for s in samples}) > 2


def test_sample_same_tokens_statistics_and_vectors(pair):
    default, static = pair
    got, want = static.sample(PROMPTS[0], Sampling(**SAMPLE)), default.sample(PROMPTS[0], Sampling(**SAMPLE))
    _same_sets(got, want)
    assert len({tuple(s.token_ids) for s in got.samples}) > 1


def test_sample_many_over_several_prompts(pair):
    default, static = pair
    got, want = static.sample_many(PROMPTS, Sampling(**SAMPLE)), default.sample_many(PROMPTS, Sampling(**SAMPLE))
    for g, w in zip(got, want):
        _same_sets(g, w)
    _ended_at_different_steps(got)


def test_generate_many(pair):
    default, static = pair
    kw = dict(max_new_tokens=12, stop=STOP, want_stats=True)
    got, want = static.generate_many(PROMPTS, **kw), default.generate_many(PROMPTS, **kw)
    for g, w in zip(got, want):
        _same(g, w)


def test_generate_and_sample_many_a_greedy_lane_beside_sample_lanes(pair):
    default, static = pair
    gens = [dict(max_new_tokens=10, stop=STOP, want_stats=True), dict(max_new_tokens=7, want_stats=False),
            dict(max_new_tokens=12, stop=[" the"], want_stats=True)]
    smps = [Sampling(**SAMPLE), Sampling(**dict(SAMPLE, k=4, seed=9, stop=[" the"])),
            Sampling(**dict(SAMPLE, k=3, max_new_tokens=6))]
    got = static.generate_and_sample_many(PROMPTS, generate=gens, sample=smps)
    want = default.generate_and_sample_many(PROMPTS, generate=gens, sample=smps)
    for (g, ss), (wg, wss) in zip(got, want):
        _same(g, wg)
        _same_sets(ss, wss)
    _ended_at_different_steps([ss for _, ss in got])


def test_rows_split_into_parts_and_chunks_give_the_same_result(pair):
    """rows_per_forward (what the out-of-memory retry halves) splits the call into several static
    steps; max_batch_rows into several calls."""
    default, static = pair
    want = default.sample_many(PROMPTS[:2], Sampling(**SAMPLE))
    try:
        static.rows_per_forward = 5
        got = static.sample_many(PROMPTS[:2], Sampling(**SAMPLE))
        static.rows_per_forward, static.max_batch_rows = None, 4
        chunked = static.sample_many(PROMPTS[:2], Sampling(**SAMPLE))
        default.max_batch_rows = 4
        chunked_want = default.sample_many(PROMPTS[:2], Sampling(**SAMPLE))
    finally:
        static.rows_per_forward = static.max_batch_rows = default.max_batch_rows = None
    for g, w in zip(got + chunked, want + chunked_want):
        _same_sets(g, w)


def test_out_of_memory_retry_runs_smaller_static_steps_with_the_same_result(pair):
    default, _ = pair
    want = default.sample(PROMPTS[1], Sampling(**SAMPLE))
    be = HFBackend(default.model, default.tokenizer, "static-oom", decode="static")
    widths = []
    real = be.forward

    def fail_wide(ids, cache=None, position_ids=None):
        widths.append(ids.shape[0])
        if ids.shape[0] > 2:
            be.oom.note_rows(ids.shape[0])
            raise torch.OutOfMemoryError("injected: CUDA out of memory")
        return real(ids, cache, position_ids)
    be.forward = fail_wide
    with pytest.warns(UserWarning, match="out of memory with 6 rows in one pass; retrying with 3"):
        got = be.sample(PROMPTS[1], Sampling(**SAMPLE))
    assert be.stats()["oom_retries"] == 2 and be.rows_per_forward == 1
    after = widths[max(i for i, w in enumerate(widths) if w > 2) + 1:]
    assert len(after) > 6 and set(after) == {1}       # after the retries: steps of one row
    _same_sets(got, want)


def test_no_host_synchronisation_inside_the_step(pair, monkeypatch):
    default, static = pair
    real = static_path.StaticStep.run
    seen = []

    def guarded(self):
        with NoHostSync() as guard:
            out = real(self)
        seen.append(len(guard.ops))
        return out
    monkeypatch.setattr(static_path.StaticStep, "run", guarded)
    got = static.sample_many(PROMPTS, Sampling(**SAMPLE))
    assert len(seen) >= 5 and min(seen) > 50          # the steps ran, under the guard
    for g, w in zip(got, default.sample_many(PROMPTS, Sampling(**SAMPLE))):
        _same_sets(g, w)


@pytest.mark.parametrize("sync", ["item", "bool", "tolist", "nonzero", "mask", "cpu", "from_list"])
def test_the_guard_sees_each_kind_of_host_synchronisation(sync):
    x = torch.randn(8)
    do = {"item": lambda: x[0].item(), "bool": lambda: bool(x.sum() > 0), "tolist": lambda: x.tolist(),
          "nonzero": lambda: (x > 0).nonzero(), "mask": lambda: x[x > 0], "cpu": lambda: x.cpu(),
          "from_list": lambda: torch.tensor([1, 2])}[sync]
    with pytest.raises(HostSync), NoHostSync():
        do()


def test_the_step_buffers_keep_their_addresses(pair, monkeypatch):
    _, static = pair
    real = static_path.StaticStep.run
    addresses = collections.defaultdict(list)

    def recording(self):
        addresses[id(self)].append({k: t.data_ptr() for k, t in self.buffers().items()})
        return real(self)
    monkeypatch.setattr(static_path.StaticStep, "run", recording)
    static.sample_many(PROMPTS, Sampling(**SAMPLE))
    (steps,) = addresses.values()           # one part: one step object for the call
    assert len(steps) == SAMPLE["max_new_tokens"] - 1
    assert len(steps[0]) == 3 + 2 * static.n_layers
    assert all(s == steps[0] for s in steps)


def test_graph_is_refused_on_a_cpu(pair):
    default, _ = pair
    with pytest.raises(UserError) as err:
        HFBackend(default.model, default.tokenizer, "g", decode="graph")
    text = err.value.paragraph()
    assert "model.decode" in text and "static" in text and "CUDA" in text
    be = HFBackend(default.model, default.tokenizer, "g")
    be.decode_path = "graph"                      # never run eagerly in its place
    with pytest.raises(UserError, match="CUDA"):
        be.sample(PROMPTS[0], Sampling(**SAMPLE))


def test_gemma3_sliding_window_layers_on_the_static_path(pair):
    """Sliding-window layers mask the prompt's keys and the row's own keys that left the window
    by the step index on the device: the same tokens as one_sync past the window."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = pair[0].tokenizer
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                           num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
                           head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                           layer_types=["sliding_attention", "full_attention"] * 2,
                           initializer_range=0.3, max_position_embeddings=4096)
    model = Gemma3ForCausalLM(cfg).eval()
    args = dict(k=5, max_new_tokens=14, seed=3, want_stats=True, layer=1)
    got = HFBackend(model, tok, "g3", decode="static").sample(PROMPTS[0], Sampling(**args))
    want = HFBackend(model, tok, "g3").sample(PROMPTS[0], Sampling(**args))
    assert max(len(s.token_ids) for s in want.samples) > 8       # past the window
    _same_sets(got, want)


def test_suffix_bytes_is_what_the_static_buffers_take_and_scales_as_rows_times_slots(pair):
    """suffix_bytes against the bytes a static suffix cache takes on a simulated card; linear in rows
    and in slots; at LLaMA-2-7B's shape (float16) every layer's keys and values of each row's slots,
    which with a 1,500-token prompt's fit in what the GPU plan reserves beside the weights
    (llm.gpu_fit.DECODING_BYTES)."""
    from seakr_repro.doubles.random_llama import SHAPES
    from seakr_repro.doubles.simulated_card import SimulatedCard
    from seakr_repro.llm import gpu_fit
    from seakr_repro.llm.peak_memory import Dims

    default, _ = pair
    cache, _ = default.prefill(default._encode(PROMPTS[0]))
    lay = cache.layers[0].keys
    card = SimulatedCard()
    with card:
        made = static_path.StaticSuffixCache(cache, rows=7, slots=11)
        buffers = sum(card.live.values()) - made.step.element_size()     # beside its step index
    assert buffers == made.nbytes() == static_path.suffix_bytes(len(cache.layers), 7, lay.shape[1], 11,
                                                                lay.shape[3], lay.element_size())
    d = Dims.shape(SHAPES["llama-2-7b"], 32_000, 2)
    slots = slots_for(100)

    def at(rows: int, slots: int) -> int:
        return static_path.suffix_bytes(d.layers, rows, d.kv_heads, slots, d.head_dim, d.bytes_per_value)
    paper = at(20, slots)
    assert at(40, slots) == at(20, 2 * slots) == 2 * paper
    assert paper == d.kv_bytes_per_token() * 20 * slots
    assert paper + d.kv_bytes_per_token() * 1500 < gpu_fit.DECODING_BYTES / 2
    assert d.weight_bytes() + gpu_fit.DECODING_BYTES < 24 * 2**30


# --- the static suffix cache against what transformers' model code may ask of a cache -------------
def _suffix_cache_and_dynamic_reference(pair, rows=3, n=6):
    """A tiny LLaMA under transformers' own sdpa attention (which builds its mask from the cache's
    answers): the same tokens decoded one at a time from an empty cache, once over a
    StaticSuffixCache, once over transformers' DynamicCache. Positions come from the cache too
    (no position_ids), so each pass asks the cache its sequence length, mask sizes and layers."""
    from transformers import DynamicCache

    default, _ = pair
    model = default.model
    torch.manual_seed(1)
    ids = torch.randint(5, len(default.tokenizer), (rows, n))
    like, _ = default.prefill(default._encode(PROMPTS[0]))
    static = static_path.StaticSuffixCache(like, rows=rows, slots=n)
    dynamic = DynamicCache()
    got, want = [], []
    before = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.no_grad():
            for j in range(n):
                got.append(model(input_ids=ids[:, j:j + 1], past_key_values=static, use_cache=True).logits)
                static.step.add_(1)              # what StaticStep.run does after each pass
                want.append(model(input_ids=ids[:, j:j + 1], past_key_values=dynamic, use_cache=True).logits)
    finally:
        model.set_attn_implementation(before)
    return static, torch.cat(got, 1), torch.cat(want, 1)


def test_the_static_suffix_cache_answers_the_model_code_as_a_transformers_cache(pair):
    """transformers' mask code asks a cache its query offset and mask sizes, the model its sequence
    length for positions, a hybrid model its layers' kinds: answered as a cache of the same tokens
    would be, so a LLaMA decodes over it exactly as over DynamicCache."""
    static, got, want = _suffix_cache_and_dynamic_reference(pair)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    n_layers = pair[0].n_layers
    assert len(static) == n_layers and static.is_sliding == [False] * n_layers
    assert int(static.get_seq_length()) == 6 and static.get_mask_sizes(1, 0) == (6, 0)
    assert static.get_max_length() == 6


def test_the_static_suffix_cache_never_synchronises_when_asked_its_length(pair):
    from transformers.masking_utils import create_causal_mask

    import copy

    static = _suffix_cache_and_dynamic_reference(pair, n=2)[0]
    cfg = copy.deepcopy(pair[0].model.config)
    cfg._attn_implementation = "sdpa"          # an attention whose mask transformers builds from the cache
    with NoHostSync():
        length = static.get_seq_length()
        create_causal_mask(config=cfg, inputs_embeds=torch.zeros(3, 1, cfg.hidden_size), attention_mask=None,
                           past_key_values=static, position_ids=torch.zeros(3, 1, dtype=torch.long))
    assert isinstance(length, torch.Tensor)


@pytest.mark.parametrize("call", ["crop", "reorder_cache", "batch_select_indices", "batch_repeat_interleave",
                                  "offload"])
def test_what_fixed_buffers_cannot_do_is_refused_by_name(pair, call):
    default, _ = pair
    like, _ = default.prefill(default._encode(PROMPTS[0]))
    static = static_path.StaticSuffixCache(like, rows=2, slots=4)
    args = {"crop": (1,), "reorder_cache": (torch.tensor([1, 0]),), "batch_select_indices": (torch.tensor([0]),),
            "batch_repeat_interleave": (2,), "offload": (0,)}[call]
    with pytest.raises(NotImplementedError, match="static suffix cache"):
        getattr(static, call)(*args)
