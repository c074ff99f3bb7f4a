"""GPU paths (run where CUDA is; skipped elsewhere): bf16 on a randomly initialised LLaMA-shaped
model agrees with float32, and sampling is reproducible on the GPU."""
import numpy as np
import pytest
from seakr_repro.llm.sampling_settings import Sampling

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(500)} | {"[UNK]": 500, "</s>": 501}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="</s>", unk_token="[UNK]")
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=502, eos_token_id=501)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg), tok


def _backend(model, tok, dtype, decode="auto"):
    import copy

    from seakr_repro.llm.hf.backend import HFBackend

    return HFBackend(copy.deepcopy(model).to("cuda", dtype), tok, "tiny-llama", decode=decode)


def test_bf16_vectors_track_float32_and_sampling_is_reproducible(tiny_llama):
    import torch

    model, tok = tiny_llama
    prompt = " ".join(f"w{i % 400}" for i in range(300))
    f32, bf16 = _backend(model, tok, torch.float32), _backend(model, tok, torch.bfloat16)
    args = dict(k=6, max_new_tokens=12, seed=3, layer=1, hook="mlp_out")
    a, b = f32.sample(prompt, Sampling(**args)), f32.sample(prompt, Sampling(**args))
    assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples]
    np.testing.assert_array_equal(a.vectors, b.vectors)
    # bf16 samples may diverge; compare the vectors of the same completions instead
    comps = [s.token_ids for s in a.samples]
    v32 = f32.eos_vectors(f32.prefill(f32._encode(prompt))[0], comps, 1, "mlp_out")
    v16 = bf16.eos_vectors(bf16.prefill(bf16._encode(prompt))[0], comps, 1, "mlp_out")
    rel = np.abs(v16 - v32).max() / np.abs(v32).max()
    assert rel < 0.05


@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
def test_fused_attention_kernels_on_cuda(dtype_name):
    """The fused decode lever's CUDA kernels (flash for half precision, memory-efficient for
    float32, whose log-sum-exp comes padded): softmax attention and its log-sum-exp."""
    import torch

    from seakr_repro.llm.hf.shared_prefix import _attend

    dtype = getattr(torch, dtype_name)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 128, generator=g, device="cuda").to(dtype) for n in (7, 1500, 1500))
    o, logsumexp = _attend(q, k, v, 128 ** -0.5)
    s = (q.float() @ k.float().transpose(-1, -2)) * 128 ** -0.5
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    assert logsumexp.shape == (2, 4, 7)
    torch.testing.assert_close(logsumexp.float(), s.logsumexp(-1), atol=tol, rtol=tol)
    torch.testing.assert_close(o.float(), s.softmax(-1) @ v.float(), atol=tol, rtol=tol)


def test_decode_paths_agree_on_cuda(tiny_llama):
    """`fused` (opt-in until a GPU has measured it) gives the loop as first written's tokens at float32."""
    import torch

    model, tok = tiny_llama
    prompt = " ".join(f"w{i % 400}" for i in range(300))
    b = _backend(model, tok, torch.float32, decode="fused")
    assert b.decode_path == "fused"
    args = dict(k=6, max_new_tokens=12, seed=3, layer=1, hook="mlp_out", want_stats=True)
    got = b.sample(prompt, Sampling(**args))
    b.decode_path = "python"
    want = b.sample(prompt, Sampling(**args))
    assert [s.token_ids for s in got.samples] == [s.token_ids for s in want.samples]
    np.testing.assert_allclose(got.vectors, want.vectors, rtol=1e-4, atol=1e-5)


# --- the graph decode path: the static step captured as a CUDA graph and replayed -----------------
# The fixture's word-level tokenizer: "w1" in a sample's text stops it (w1, w10-w19, w100-w199: about
# a fifth of the tokens), so rows end at different steps and stay in the batch as padding.
GRAPH_ARGS = dict(k=8, max_new_tokens=16, seed=3, layer=1, hook="mlp_out", want_stats=True, stop=["w1"])
GRAPH_PROMPT = " ".join(f"w{i % 400}" for i in range(300))


def _same_samples(got, want, tol, vectors_rel=0.0):
    assert [s.token_ids for s in got.samples] == [s.token_ids for s in want.samples]
    assert [s.finish_reason for s in got.samples] == [s.finish_reason for s in want.samples]
    for g, w in zip(got.samples, want.samples):
        a = g.logprobs + g.entropies + g.logsumexp + (g.warped_logprobs or [])
        b = w.logprobs + w.entropies + w.logsumexp + (w.warped_logprobs or [])
        np.testing.assert_allclose(a, b, rtol=0, atol=tol)
    # the forced-EOS pass is not a decode step: the same tokens give the same vectors, bit for bit
    # when its passes have the same rows (rows_per_forward), else within rounding
    assert np.abs(got.vectors - want.vectors).max() <= vectors_rel * np.abs(want.vectors).max()


@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
def test_graph_path_captures_once_replays_and_matches_static_and_one_sync(tiny_llama, dtype_name, monkeypatch):
    """One capture per call; replays after rows finished; the same tokens (and statistics within
    float rounding) as the same step run eagerly (static) and, at float32, as the default path
    (one_sync)."""
    import torch

    from seakr_repro.llm.hf.decode import graph as graph_path
    from seakr_repro.llm.hf.decode import static as static_path

    model, tok = tiny_llama
    b = _backend(model, tok, getattr(torch, dtype_name), decode="graph")
    assert b.decode_path == "graph"
    log, captures = [], []
    real_next, real_capture = static_path.StaticRows.next_logits, graph_path.GraphStep._capture

    def logged(self, drawn, keep):
        out = real_next(self, drawn, keep)
        log.append((len(self.batch.live), len(self.rows), all(getattr(s, "graph", None) is not None
                                                              for s in self.steps)))
        return out
    monkeypatch.setattr(static_path.StaticRows, "next_logits", logged)
    monkeypatch.setattr(graph_path.GraphStep, "_capture", lambda self: captures.append(1) or real_capture(self))
    got = b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS))
    graph_log = list(log)
    assert captures == [1]
    assert any(replayed and live < rows for live, rows, replayed in graph_log), graph_log
    assert len({len(s.all_token_ids) for s in got.samples}) > 1
    b.decode_path = "static"
    eager = b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS))
    b.decode_path = "one_sync"
    default = b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS))
    if dtype_name == "float32":
        _same_samples(got, eager, 1e-5)
        _same_samples(got, default, 1e-5)
    else:
        # the same kernels replayed: the eager step's tokens; one_sync's step is a different
        # computation (rows leave the batch, no masked slots), so half precision rounds it
        # differently and a draw near a boundary may go the other way: nearly all rows agree
        _same_samples(got, eager, 2e-3)
        same = [g.token_ids == w.token_ids for g, w in zip(got.samples, default.samples)]
        assert sum(same) >= len(same) - 1, same
    b.decode_path = "graph"                    # a second call captures again (its own prompts)
    _same_samples(b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS)), got, 0.0)
    assert captures == [1, 1]


def test_graph_path_over_several_parts_and_prompts(tiny_llama):
    """Rows split into parts (rows_per_forward: what the out-of-memory retry halves), each part a
    graph of its own in one shared memory pool; several prompts and a greedy lane beside them."""
    import torch

    model, tok = tiny_llama
    b = _backend(model, tok, torch.float32, decode="graph")
    prompts = [GRAPH_PROMPT, " ".join(f"w{(7 * i) % 500}" for i in range(200))]
    gen = dict(max_new_tokens=12, stop=["w1"], want_stats=True)
    b.rows_per_forward = 3
    got = b.generate_and_sample_many(prompts, generate=gen, sample=Sampling(**GRAPH_ARGS))
    b.rows_per_forward, b.decode_path = None, "static"
    want = b.generate_and_sample_many(prompts, generate=gen, sample=Sampling(**GRAPH_ARGS))
    for (g, ss), (wg, wss) in zip(got, want):
        assert g.token_ids == wg.token_ids
        _same_samples(ss, wss, 1e-5, vectors_rel=1e-4)


def test_out_of_memory_while_capturing_reaches_the_retry(tiny_llama):
    """An out-of-memory error raised while the step is being captured goes to the backend's
    out-of-memory retry as one: more, smaller parts, the same tokens."""
    import torch

    model, tok = tiny_llama
    b = _backend(model, tok, torch.float32, decode="graph")
    want = b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS))
    real = b.forward

    def fail_wide_capture(ids, cache=None, position_ids=None):
        if torch.cuda.is_current_stream_capturing() and ids.shape[0] > 2:
            b.oom.note_rows(ids.shape[0])
            raise torch.OutOfMemoryError("injected while capturing")
        return real(ids, cache, position_ids)
    b.forward = fail_wide_capture
    with pytest.warns(UserWarning, match="out of memory with 8 rows in one pass"):
        got = b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS))
    assert b.stats()["oom_retries"] == 2 and b.rows_per_forward == 2
    _same_samples(got, want, 1e-5, vectors_rel=1e-4)


@pytest.mark.parametrize("path", ["one_sync", "static", "graph"])
def test_the_retrys_fewer_rows_per_pass_lower_the_peak_on_cuda(tiny_llama, path):
    """What the out-of-memory retry runs (rows_per_forward): the other parts' suffix keys and values
    in host memory, the sampler by rows; the peak torch allocates falls below the call's in one pass,
    with the same tokens (tests/test_oom_retry_memory.py shows it in bytes on a CPU's simulated card)."""
    import torch

    model, tok = tiny_llama
    b = _backend(model, tok, torch.float32, decode=path)      # float32: passes of other widths round alike
    args = dict(GRAPH_ARGS, k=16, max_new_tokens=64, stop=[])

    def peak(rows):
        b.rows_per_forward = rows
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        got = b.sample(GRAPH_PROMPT, Sampling(**args))
        torch.cuda.synchronize()
        return got, torch.cuda.max_memory_allocated() - base
    want, whole = peak(None)
    got, split = peak(2)
    assert split < whole, (split, whole)
    _same_samples(got, want, 1e-5, vectors_rel=1e-4)


def test_static_step_has_no_host_synchronisation_on_cuda(tiny_llama, monkeypatch):
    """On the GPU the guard also sees device-to-host copies and tensors made from host data."""
    import torch

    from host_sync_guard import NoHostSync
    from seakr_repro.llm.hf.decode import static as static_path

    model, tok = tiny_llama
    b = _backend(model, tok, torch.float16, decode="static")
    real, seen = static_path.StaticStep.run, []

    def guarded(self):
        with NoHostSync() as guard:
            out = real(self)
        seen.append(len(guard.ops))
        return out
    monkeypatch.setattr(static_path.StaticStep, "run", guarded)
    b.sample(GRAPH_PROMPT, Sampling(**GRAPH_ARGS))
    assert len(seen) >= 5 and min(seen) > 50
