"""Shared-prefix decoding on the transformers backend against the reference path (the prompt's
cache copied into every row), on the real default model (SmolLM2 = LLaMA architecture, GQA)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seakr_repro.prompts import demos_for
from seakr_repro.prompts.seakr import build_prompt, stop_strings
from seakr_repro.uncertainty.eigenscore import eigen_score, identical_vectors_score
from seakr_repro.llm.sampling_settings import Sampling

ARGS = dict(k=8, max_new_tokens=12, stop=stop_strings(False, False), seed=5, layer=14)


@pytest.fixture(scope="module")
def pair():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir

    torch.set_num_threads(1)
    new = HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")
    ref = HFBackend(new.model, new.tokenizer, new.name, shared_prefix=False)
    assert new.shared_prefix and not ref.shared_prefix
    return new, ref


def _prompts():
    demos = demos_for("bundled-2wiki", 4)          # a few hundred tokens of demonstrations
    return [build_prompt(demos, "Who was born first, Aristotle or Plato?"),
            build_prompt(demos, "Where did Abraham Lincoln die?", docs=["Lincoln died in Washington."]),
            "Question: Who painted the Mona Lisa?\nAnswer:"]


def _ids(ss):
    return [s.token_ids for s in ss.samples]


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("hook", ["mlp_out", "residual"])
def test_same_tokens_and_vectors_as_the_reference_path(pair, hook):
    new, ref = pair
    p = _prompts()[0]
    assert new.count_tokens(p) > 300
    got, want = new.sample(p, Sampling(hook=hook, **ARGS)), ref.sample(p, Sampling(hook=hook, **ARGS))
    assert _ids(got) == _ids(want)
    assert len({tuple(i) for i in _ids(got)}) > 1, "the samples should differ from each other"
    flat = lambda ss: [x for s in ss.samples for x in s.logprobs]   # noqa: E731
    assert flat(got) == pytest.approx(flat(want), abs=1e-4)
    assert _rel(got.vectors, want.vectors) < 1e-4


def test_chunked_rows_match_the_chunked_reference(pair):
    new, ref = pair
    p = _prompts()[1]
    try:
        new.max_batch_rows = ref.max_batch_rows = 3
        got, want = new.sample(p, Sampling(**ARGS)), ref.sample(p, Sampling(**ARGS))
    finally:
        new.max_batch_rows = ref.max_batch_rows = None
    assert _ids(got) == _ids(want)
    assert _rel(got.vectors, want.vectors) < 1e-4


def test_sample_many_equals_sample_one_after_another(pair):
    new, _ = pair
    prompts = _prompts()
    together = new.sample_many(prompts, Sampling(**ARGS))
    for ss, p in zip(together, prompts):
        alone = new.sample(p, Sampling(**ARGS))
        assert _ids(ss) == _ids(alone)
        assert [s.text for s in ss.samples] == [s.text for s in alone.samples]
        assert _rel(ss.vectors, alone.vectors) < 1e-5


def test_generate_many_equals_generate_one_after_another(pair, tmp_path):
    from seakr_repro.llm.cache import CachedBackend

    new, _ = pair
    prompts = _prompts()
    kw = dict(max_new_tokens=12, stop=stop_strings(False, False), want_stats=True)
    together = new.generate_many(prompts, **kw)
    for g, p in zip(together, prompts):
        alone = new.generate(p, **kw)
        assert (g.token_ids, g.text, g.finish_reason) == (alone.token_ids, alone.text, alone.finish_reason)
        assert g.warped_logprobs is None and alone.warped_logprobs is None
        assert max(abs(a - b) for a, b in zip(g.logprobs, alone.logprobs)) < 1e-4
        assert max(abs(a - b) for a, b in zip(g.entropies, alone.entropies)) < 1e-4
    # through the call cache: the same batch, stored under generate's keys (a later single call hits)
    cached = CachedBackend(new, root=tmp_path)
    assert [g.text for g in cached.generate_many(prompts, **kw)] == [g.text for g in together]
    assert cached.hits == 0
    assert cached.generate(prompts[0], **kw).text == together[0].text
    assert cached.hits == 1


def test_generate_and_sample_many_equals_the_two_calls(pair, tmp_path):
    """SeaKR's step and its U in one batch: the greedy row rides in the samples' batch (its own
    lane, its own stops and length) and changes neither the samples nor the greedy output."""
    from seakr_repro.llm.base import generate_and_sample_many
    from seakr_repro.llm.cache import CachedBackend

    new, ref = pair
    prompts = _prompts()
    gen = dict(max_new_tokens=20, stop=stop_strings(False, True), want_stats=True)  # not ARGS' stops
    merged = new.generate_and_sample_many(prompts, generate=gen, sample=Sampling(**ARGS))
    assert len(merged) == len(prompts) and all(g.token_ids for g, _ in merged)
    for (g, ss), p in zip(merged, prompts):
        alone = new.generate(p, **gen)
        assert (g.token_ids, g.text, g.finish_reason) == (alone.token_ids, alone.text, alone.finish_reason)
        assert max(abs(a - b) for a, b in zip(g.entropies, alone.entropies)) < 1e-4
        want = new.sample(p, Sampling(**ARGS))
        assert _ids(ss) == _ids(want)
        assert _rel(ss.vectors, want.vectors) < 1e-5
    # the reference path and any backend without the method: the two calls, same results
    for g, ss in [*ref.generate_and_sample_many(prompts[:1], generate=gen, sample=Sampling(**ARGS))]:
        assert g.token_ids == merged[0][0].token_ids and _ids(ss) == _ids(merged[0][1])
    # through the call cache: stored and counted as the two calls (a later single call hits)
    cached = CachedBackend(new, root=tmp_path)
    got = generate_and_sample_many(cached, prompts, generate=gen, sample=Sampling(**ARGS))
    assert [g.text for g, _ in got] == [g.text for g, _ in merged]
    assert (cached.calls, cached.hits) == (2 * len(prompts), 0)
    assert cached.generate(prompts[1], **gen).text == merged[1][0].text
    assert _ids(cached.sample(prompts[2], Sampling(**ARGS))) == _ids(merged[2][1])
    assert cached.hits == 2
    # half cached: the missing half alone is computed
    cached2 = CachedBackend(new, root=tmp_path / "b")
    cached2.generate(prompts[0], **gen)
    got = cached2.generate_and_sample_many(prompts[:1], generate=gen, sample=Sampling(**ARGS))
    assert _ids(got[0][1]) == _ids(merged[0][1]) and (cached2.calls, cached2.hits) == (3, 1)


def test_generate_and_sample_many_with_settings_per_prompt(pair, tmp_path):
    """SeaKR's two final calls have different stops: one batch, each prompt's lanes with its own
    stops, lengths and seed, and the same results as each prompt's own calls (also through the
    call cache and on a backend without the method)."""
    from seakr_repro.llm.base import generate_and_sample_many
    from seakr_repro.llm.cache import CachedBackend

    new, ref = pair
    prompts = _prompts()[:2]
    gens = [dict(max_new_tokens=16, stop=stop_strings(True, False), want_stats=True),
            dict(max_new_tokens=9, stop=stop_strings(False, True), want_stats=False)]
    smps = [Sampling(**dict(ARGS, seed=1)), Sampling(**dict(ARGS, k=5, stop=stop_strings(False, True)))]
    merged = new.generate_and_sample_many(prompts, generate=gens, sample=smps)
    for (g, ss), p, gk, sk in zip(merged, prompts, gens, smps):
        alone = new.generate(p, **gk)
        assert (g.token_ids, g.text, g.finish_reason) == (alone.token_ids, alone.text, alone.finish_reason)
        assert (g.entropies is None) == (not gk["want_stats"])
        want = new.sample(p, sk)
        assert _ids(ss) == _ids(want) and len(ss.samples) == sk.k
        assert _rel(ss.vectors, want.vectors) < 1e-5
    cached = CachedBackend(new, root=tmp_path)
    got = generate_and_sample_many(cached, prompts, generate=gens, sample=smps)
    assert [(g.text, _ids(ss)) for g, ss in got] == [(g.text, _ids(ss)) for g, ss in merged]
    assert cached.sample(prompts[1], smps[1]) is not None and cached.hits == 1

    class Plain:       # a backend with only the two calls: grouped by settings, same results
        def __init__(self, inner):
            self.inner = inner

        def generate_many(self, ps, **kw):
            return self.inner.generate_many(ps, **kw)

        def sample_many(self, ps, settings):
            return self.inner.sample_many(ps, settings)

    plain = generate_and_sample_many(Plain(new), prompts, generate=gens, sample=smps)
    assert [(g.text, _ids(ss)) for g, ss in plain] == [(g.text, _ids(ss)) for g, ss in merged]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_identical_completions_get_identical_vectors_and_the_floor_of_u(pair, dtype):
    from seakr_repro.llm.hf.backend import HFBackend
    new, _ = pair
    model = new.model if dtype == torch.float32 else _copy_in(new.model, dtype)
    be = HFBackend(model, new.tokenizer, new.name)
    p = _prompts()[0]
    # greedy "sampling": twenty identical completions through the whole decoding path
    ss = be.sample(p, Sampling(**{**ARGS, "k": 20, "temperature": 0.0}))
    assert len({tuple(i) for i in _ids(ss)}) == 1 and ss.samples[0].token_ids
    assert (ss.vectors == ss.vectors[0]).all(), "identical samples must get identical vectors"
    z = ss.vectors[0].astype(np.float64)
    floor = identical_vectors_score(20, float(((z - z.mean()) ** 2).sum()))
    assert eigen_score(ss.vectors) == pytest.approx(floor, abs=1e-9)
    # identical completions next to shorter ones (right padding) still agree with each other
    comp = ss.samples[0].token_ids
    v = be.eos_vectors(be.prefill(be._encode(p))[0], [comp] * 10 + [comp[:2]] * 10, 14, "mlp_out")
    assert (v[:10] == v[0]).all() and (v[10:] == v[10]).all()


def _copy_in(model, dtype):
    import copy
    return copy.deepcopy(model).to(dtype)


def test_out_of_memory_halves_the_rows_and_gives_the_same_result(pair):
    from seakr_repro.llm.hf.backend import HFBackend
    new, _ = pair
    be = HFBackend(new.model, new.tokenizer, new.name)
    p = _prompts()[2]
    want = be.sample(p, Sampling(**ARGS))
    fired = []

    def fail_once(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[0] > 4 and not fired:
            fired.append(ids.shape[0])
            raise torch.OutOfMemoryError("injected: CUDA out of memory")

    handle = be.model.model.register_forward_pre_hook(fail_once, with_kwargs=True)
    try:
        with pytest.warns(UserWarning, match="out of memory"):
            got = be.sample(p, Sampling(**ARGS))
    finally:
        handle.remove()
    assert fired == [8]
    assert be.stats()["oom_retries"] == 1 and be.rows_per_forward == 4
    assert _ids(got) == _ids(want)
    assert _rel(got.vectors, want.vectors) < 1e-5


def test_out_of_memory_retries_reach_the_run_row(pair, tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.methods.base import MethodResult
    from seakr_repro.data.records import QuestionRecord
    from seakr_repro.runs.runner import run_method

    new, _ = pair
    be = HFBackend(new.model, new.tokenizer, new.name)
    cached = CachedBackend(be, root=tmp_path / "cache", enabled=False)
    state = {"armed": False}

    def fail_once(_module, args, kwargs):
        if state["armed"] and kwargs["input_ids"].shape[0] > 2:
            state["armed"] = False
            raise torch.OutOfMemoryError("injected")

    class OneSample:
        name = "one-sample"

        def run(self, record):
            state["armed"] = record.id == "b"
            ss = cached.sample(record.question, Sampling(k=4, max_new_tokens=3, seed=1))
            return MethodResult(answer=ss.samples[0].text, raw_output="")

    handle = be.model.model.register_forward_pre_hook(fail_once, with_kwargs=True)
    try:
        with pytest.warns(UserWarning, match="out of memory"):
            rows = run_method(OneSample(), [QuestionRecord("a", "Question: 1+1?\nAnswer:", ["2"]),
                                            QuestionRecord("b", "Question: 2+2?\nAnswer:", ["4"])],
                              tmp_path / "r.jsonl", backend=cached, progress=False)
    finally:
        handle.remove()
    assert [r["oom_retries"] for r in rows] == [0, 1]
    # what the retry cost: the failed attempt's seconds, on the question that ran out of memory
    assert rows[0]["oom_seconds"] == 0 and rows[1]["oom_seconds"] > 0


def test_unsupported_architecture_falls_back_visibly(pair):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from seakr_repro.llm.hf.backend import HFBackend
    new, _ = pair
    cfg = Qwen2Config(vocab_size=new.tokenizer.vocab_size + 64, hidden_size=16, intermediate_size=32,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    with pytest.warns(UserWarning, match="shared-prefix decoding is off"):
        be = HFBackend(Qwen2ForCausalLM(cfg), new.tokenizer, "tiny-qwen2")
    assert not be.shared_prefix and be.shared_prefix_unsupported
    ss = be.sample("Question: hi?\nAnswer:", Sampling(k=3, max_new_tokens=3, seed=1, layer=0))
    assert ss.vectors.shape == (3, 16)


def _tiny_gemma3(tokenizer, window: int):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=tokenizer.vocab_size + 64, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
                           head_dim=16, query_pre_attn_scalar=16, sliding_window=window,
                           layer_types=["sliding_attention", "full_attention"] * 2,
                           initializer_range=0.3, max_position_embeddings=4096)
    return Gemma3ForCausalLM(cfg).eval()


def test_gemma3_sliding_window_layers_decode_shared_with_the_reference_results(pair):
    """Gemma-3 (Table 4's second backbone): its sliding-window layers are masked as transformers
    masks them, so shared-prefix decoding gives the reference path's tokens and vectors, also
    past the window (a 40-token prompt, a window of 24, samples of up to 12 tokens)."""
    from seakr_repro.llm.hf.backend import HFBackend

    new, _ = pair
    model = _tiny_gemma3(new.tokenizer, window=24)
    shared = HFBackend(model, new.tokenizer, "tiny-gemma3")
    ref = HFBackend(model, new.tokenizer, "tiny-gemma3", shared_prefix=False)
    assert shared.shared_prefix and shared.shared_prefix_unsupported is None
    prompt = "Question: " + "Who was born first, Aristotle or Plato? " * 3 + "\nAnswer:"
    assert 24 < shared.count_tokens(prompt) < 60
    args = dict(k=6, max_new_tokens=12, seed=3, layer=1)
    got, want = shared.sample(prompt, Sampling(**args)), ref.sample(prompt, Sampling(**args))
    assert _ids(got) == _ids(want)
    assert max(len(i) for i in _ids(got)) > 1
    assert _rel(got.vectors, want.vectors) < 1e-4
    g = dict(max_new_tokens=12, want_stats=True)
    (greedy, ss), = shared.generate_and_sample_many([prompt], generate=g, sample=Sampling(**args))
    assert greedy.token_ids == ref.generate(prompt, **g).token_ids and _ids(ss) == _ids(want)


def test_out_of_memory_on_the_reference_path_shrinks_its_chunks(pair):
    from seakr_repro.llm.hf.backend import HFBackend
    new, _ = pair
    be = HFBackend(new.model, new.tokenizer, new.name, shared_prefix=False)
    fired = []

    def fail_once(_module, args, kwargs):
        if kwargs["input_ids"].shape[0] > 4 and not fired:
            fired.append(kwargs["input_ids"].shape[0])
            raise torch.OutOfMemoryError("injected")

    handle = be.model.model.register_forward_pre_hook(fail_once, with_kwargs=True)
    try:
        with pytest.warns(UserWarning, match="out of memory"):
            got = be.sample(_prompts()[2], Sampling(**ARGS))
    finally:
        handle.remove()
    assert fired == [8] and be.stats()["oom_retries"] == 1 and len(got.samples) == 8
    assert got.vectors.shape[0] == 8


def test_out_of_memory_with_several_contexts_halves_the_contexts_and_gives_the_same_result(pair):
    """Simple QA scores ten passages in one sample_many at paper scale, each with its own prompt
    cache: an out-of-memory error splits the batch of contexts, and every context still draws
    the samples it draws alone."""
    from seakr_repro.llm.hf.backend import HFBackend
    new, _ = pair
    prompts = _prompts()[:3]
    want = HFBackend(new.model, new.tokenizer, new.name).sample_many(prompts, Sampling(**ARGS))
    be = HFBackend(new.model, new.tokenizer, new.name)
    fired = []

    def fail_once(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[0] > ARGS["k"] and not fired:
            fired.append(ids.shape[0])
            raise torch.OutOfMemoryError("injected: CUDA out of memory")

    handle = be.model.model.register_forward_pre_hook(fail_once, with_kwargs=True)
    try:
        with pytest.warns(UserWarning, match="3 contexts in one batch"):
            got = be.sample_many(prompts, Sampling(**ARGS))
    finally:
        handle.remove()
    assert fired == [3 * ARGS["k"]] and be.contexts_per_batch == 1 and be.stats()["oom_retries"] == 1
    for g, w in zip(got, want):
        assert _ids(g) == _ids(w) and _rel(g.vectors, w.vectors) < 1e-5
    # the setting gives the same batches from the start, for greedy steps too
    one = HFBackend(new.model, new.tokenizer, new.name, max_batch_contexts=1)
    assert [_ids(s) for s in one.sample_many(prompts, Sampling(**ARGS))] == [_ids(w) for w in want]
    greedy = dict(max_new_tokens=5, stop=["\n"])
    assert [g.token_ids for g in one.generate_many(prompts, **greedy)] == \
        [g.token_ids for g in be.generate_many(prompts, **greedy)]


def test_decode_paths_one_sync_bit_identical_and_fused_same_tokens(pair, tmp_path):
    """Issue 39's levers at float32: one_sync gives the loop as first written bit for bit (greedy
    lane and samples, statistics, vectors); fused the same tokens and vectors, statistics within
    the shared-prefix bound. `auto` is one_sync on the CPU."""
    new, _ = pair
    assert new.decode_path == "one_sync"
    p = _prompts()[:2]
    smp = Sampling(**ARGS, want_stats=True)
    got = {}
    try:
        for path in ("python", "one_sync", "fused"):
            new.decode_path = path
            got[path] = new.generate_and_sample_many(
                p, generate={"max_new_tokens": 10, "stop": ARGS["stop"], "want_stats": True}, sample=smp)
    finally:
        new.decode_path = "one_sync"
    stats = lambda g: [(s.logprobs, s.entropies, s.logsumexp, s.warped_logprobs)    # noqa: E731
                       for s in [g[0], *g[1].samples]]
    for (g_py, ss_py), (g_os, ss_os), (g_fu, ss_fu) in zip(got["python"], got["one_sync"], got["fused"]):
        assert g_py.token_ids == g_os.token_ids == g_fu.token_ids
        assert _ids(ss_py) == _ids(ss_os) == _ids(ss_fu)
        assert stats((g_py, ss_py)) == stats((g_os, ss_os))
        np.testing.assert_array_equal(ss_py.vectors, ss_os.vectors)
        np.testing.assert_array_equal(ss_py.vectors, ss_fu.vectors)   # the EOS pass is not a decode step
        flat = lambda g, ss: [x for s in [g, *ss.samples] for x in s.logprobs + s.entropies]  # noqa: E731
        assert flat(g_fu, ss_fu) == pytest.approx(flat(g_py, ss_py), abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_attention_kernel_returns_softmax_and_logsumexp(dtype):
    """`_attend` (the fused decode lever's kernel call): output and log-sum-exp of plain
    softmax attention, any number of queries per key set (tests/test_gpu.py: the CUDA kernels)."""
    from seakr_repro.llm.hf.shared_prefix import _attend

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 16, generator=g).to(dtype) for n in (5, 37, 37))
    o, logsumexp = _attend(q, k, v, 0.25)
    s = (q.float() @ k.float().transpose(-1, -2)) * 0.25
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert logsumexp.dtype == torch.float32 and logsumexp.shape == (2, 3, 5)
    torch.testing.assert_close(logsumexp, s.logsumexp(-1), atol=tol, rtol=tol)
    torch.testing.assert_close(o.float(), s.softmax(-1) @ v.float(), atol=tol, rtol=tol)
