"""DRAGIN's backend calls: `words` (its merge of tokens into words) and `attention_rows` (last-layer
attention of chosen positions over a whole sequence), on the transformers backend with the real
default model, through the cache, and in the vLLM worker's hook (plumbing, no vLLM needed)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seakr_repro.llm.attention import merge_words

TEXT = "Who directed Zorro Nights? Zorro Nights was directed by Ann Lee.\nQuestion: who"


@pytest.fixture(scope="module")
def backend():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")
    torch.set_num_threads(before)          # the process's setting, for the tests that follow


def test_merge_words_follows_dragins_rule():
    # SentencePiece pieces: a word starts at "▁", at the newline id (13) and after EOS (2)
    pieces = ["<s>", "▁Ann", "▁Le", "e", ".", "<0x0A>", "Question", ":", "</s>", "x"]
    ids = [1, 10, 11, 12, 14, 13, 15, 16, 2, 17]
    words = merge_words(ids, pieces, "\u2581", 13, 2)
    assert words == [(0, 0, "<s>"), (1, 1, "Ann"), (2, 4, "Lee."), (5, 8, "<0x0A>Question:</s>"),
                     (9, 9, "x")]


def test_words_on_a_byte_level_tokenizer(backend):
    ids = backend.encode(TEXT)
    words = backend.words(ids)
    assert [w for _, _, w in words][:6] == ["Who", "directed", "Zorro", "Nights?", "Zorro", "Nights"]
    assert words[0][0] == 0 and words[-1][1] == len(ids) - 1
    assert all(a <= b and (i == 0 or a == words[i - 1][1] + 1) for i, (a, b, _) in enumerate(words))
    # the newline token starts a word, and the next token joins it (as in DRAGIN's merge)
    assert any(ids[a] == backend._newline_id and "Question" in w for a, _, w in words)


def test_attention_rows_are_the_head_mean_of_the_last_layer(backend):
    ids = backend.encode(TEXT)
    positions = [len(ids) - 1, 3, 10]
    rows = np.array(backend.attention_rows(ids, positions))
    backend.model.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            ref = backend.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions[-1][0]
    finally:
        backend.model.set_attn_implementation("sdpa")
    ref = ref.float().mean(0)[positions].numpy()
    assert rows.shape == (3, len(ids))
    np.testing.assert_allclose(rows, ref, atol=1e-5)
    np.testing.assert_allclose(rows.sum(1), 1.0, atol=1e-4)
    assert not rows[1, 4:].any() and rows[1, :4].all()          # causal: nothing after position 3
    assert backend.attention_rows(ids, []) == []


def test_attention_rows_are_cached(backend, tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    cached = CachedBackend(backend, tmp_path)
    ids = cached.encode("Ann Lee directed Zorro Nights.")
    first = cached.attention_rows(ids, [2, 4])
    again = cached.attention_rows(ids, [2, 4])
    assert first == again and cached.stats()["cache_hits"] == 1 and cached.stats()["cache_misses"] == 1
    assert cached.words(ids) == backend.words(ids)


# ------------------------------------------------------------------------------- vLLM plumbing
class _Attn(torch.nn.Module):
    def forward(self, q, k, v):
        return q


def _fake_worker(n_heads=4, n_kv=2, head_dim=8):
    attn = _Attn()
    self_attn = SimpleNamespace(attn=attn, num_heads=n_heads, num_kv_heads=n_kv, head_dim=head_dim,
                                scaling=head_dim ** -0.5)
    layer0 = torch.nn.Identity()
    last = SimpleNamespace(self_attn=self_attn)
    model = SimpleNamespace(model=SimpleNamespace(layers=[layer0, last]))
    runner = SimpleNamespace(model=model, requests={}, input_batch=SimpleNamespace(num_reqs=0, req_ids=[]),
                             query_start_loc=SimpleNamespace(np=np.zeros(1, dtype=np.int64)))
    return SimpleNamespace(model_runner=runner), attn


def _schedule(worker, reqs):
    """One forward's batch: [(request id, spec, n tokens)]."""
    r = worker.model_runner
    r.input_batch.num_reqs, r.input_batch.req_ids = len(reqs), [rid for rid, _, _ in reqs]
    r.query_start_loc.np = np.cumsum([0] + [n for _, _, n in reqs])
    for rid, spec, _ in reqs:
        r.requests[rid] = SimpleNamespace(sampling_params=SimpleNamespace(extra_args={"seakr": spec}))
    worker._seakr_capture._rows = None        # what the first decoder layer's pre-hook does


def test_vllm_worker_rows_match_a_direct_computation_across_prefill_chunks():
    from seakr_repro.llm.vllm import worker as vllm_worker
    torch.manual_seed(0)
    worker, attn = _fake_worker()
    vllm_worker.install(worker, [("attention",)])
    n, heads, kv, d = 12, 4, 2, 8
    q, k = torch.randn(n, heads * d), torch.randn(n, kv * d)
    spec = {"tag": "t", "rows": [2, 7, 11]}
    other = {"tag": "o"}                                # an untagged neighbour in the batch
    # the request's prefill in two chunks (5 + 7 tokens), batched after 3 tokens of another one
    for lo, hi in ((0, 5), (5, 12)):
        _schedule(worker, [("other", other, 3), ("req", spec, hi - lo)])
        attn(torch.cat([torch.randn(3, heads * d), q[lo:hi]]),
             torch.cat([torch.randn(3, kv * d), k[lo:hi]]), None)
    got = vllm_worker.fetch(worker, ["t"])["t"]["rows"]
    rows, n_heads = got
    qq = q.reshape(n, heads, d).transpose(0, 1)
    kk = k.reshape(n, kv, d).transpose(0, 1).repeat_interleave(heads // kv, dim=0)
    full = ((qq @ kk.transpose(1, 2)) * d ** -0.5).masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    assert n_heads == heads and sorted(rows) == [2, 7, 11]
    for p in (2, 7, 11):
        np.testing.assert_allclose(rows[p], full[:, p].sum(0).numpy(), atol=1e-5)


def test_vllm_backend_attention_rows_average_the_tensor_parallel_heads():
    from seakr_repro.llm.vllm import backend as vllm_backend
    from seakr_repro.llm.vllm import engine
    seen = {}

    class Engine:
        def call(self, fn, *args):
            return [True]

        def run(self, prompts, params, tags):
            seen.update(prompt=prompts[0], params=params[0])
            w0 = {tags[0]: {"rows": ({3: np.array([2.0, 2.0]), 5: np.array([4.0, 0.0])}, 2)}}
            w1 = {tags[0]: {"rows": ({3: np.array([0.0, 2.0]), 5: np.array([2.0, 2.0])}, 2)}}
            return [(None, engine.combine([w0, w1])[tags[0]])]

    b = object.__new__(vllm_backend.VLLMBackend)
    b._engine, b._installed, b.max_model_len, b.max_context = Engine(), set(), 100, 100
    b.name = "fake"
    b._install_lock = __import__("threading").Lock()
    b._params = lambda **kw: kw
    rows = b.attention_rows([5, 6, 7, 8, 9, 10], [5, 3, 5])
    assert rows == [[1.5, 0.5], [0.5, 1.0], [1.5, 0.5]]           # summed heads / 4 heads
    assert seen["params"]["extra_args"]["seakr"]["rows"] == [3, 5]
    assert seen["prompt"]["prompt_token_ids"] == [5, 6, 7, 8, 9, 10] and seen["prompt"]["cache_salt"]


@pytest.mark.slow
def test_dragin_faithful_runs_on_the_real_model(backend):
    """End to end on SmolLM2: a threshold of 0 makes the first chunk retrieve, with a query from
    the real attention rows."""
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from fakes import FakeSearcher, hit
    from seakr_repro.data.records import QuestionRecord
    from seakr_repro.methods import build_method
    s = FakeSearcher([hit("d1", "Zorro Nights was directed by Ann Lee.")])
    q = QuestionRecord(id="q", question="Who directed the film Zorro Nights?", answers=["Ann Lee"])
    m = build_method("dragin", backend, s, "bundled-2wiki", mode="faithful", n_shot=1,
                     max_new_tokens=8, threshold=0.0)
    r = m.run(q)
    assert r.n_retrievals >= 1 and s.queries[0].strip()
    first = r.trace[0]
    assert first["query_positions"] and first["flagged"]
    assert set(s.queries[0].split()) <= set((q.question + " " + first["output"]).replace("\n", " ").split())
