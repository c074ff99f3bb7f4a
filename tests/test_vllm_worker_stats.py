"""The vLLM worker's statistics (stats hook and `score`'s fetch) on a fake worker, without vLLM:
they must equal the raw distribution's entropy and logsumexp written out independently here."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from seakr_repro.llm.vllm import worker as vllm_worker

VOCAB, HIDDEN = 11, 6


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(HIDDEN, HIDDEN)])
        self.norm = torch.nn.Identity()


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.model = _Inner()
        self.logits_processor = torch.nn.Identity()      # its forward hook sees the logits
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def compute_logits(self, h):
        return self.head(h)


def _worker(specs: list[dict], lengths: list[int]):
    """A worker whose current batch holds one request per spec, with `lengths` query rows each."""
    reqs = {f"r{i}": SimpleNamespace(sampling_params=SimpleNamespace(
        extra_args={vllm_worker.KEY: spec})) for i, spec in enumerate(specs)}
    runner = SimpleNamespace(
        model=_Model(), requests=reqs,
        input_batch=SimpleNamespace(num_reqs=len(specs), req_ids=list(reqs)),
        query_start_loc=SimpleNamespace(np=np.cumsum([0, *lengths])))
    return SimpleNamespace(model_runner=runner)


def _reference(logits: torch.Tensor):
    p = torch.softmax(logits.double(), dim=-1)
    entropy = -(p * torch.log(p)).sum(-1)
    logsumexp = torch.log(torch.exp(logits.double()).sum(-1))
    return entropy, logsumexp


def test_stats_hook_records_entropy_and_logsumexp_per_tagged_request():
    w = _worker([{"tag": "a", "stats": True}, {"tag": "b"}], [1, 1])
    vllm_worker.install(w, [("stats",)])
    model = w.model_runner.model
    logits = torch.randn(2, VOCAB) * 3
    model.logits_processor(logits)
    got = vllm_worker.fetch(w, ["a", "b"])
    ent, logsumexp = _reference(logits[0])
    (e, s), = got["a"]["stats"]
    assert abs(e - float(ent)) < 1e-5 and abs(s - float(logsumexp)) < 1e-5
    assert "stats" not in got["b"]


def test_score_fetch_turns_hidden_states_into_logprobs_entropies_logsumexps():
    w = _worker([{"tag": "s", "hidden": True}], [5])
    vllm_worker.install(w, [("hidden",)])
    model = w.model_runner.model
    h = torch.randn(5, HIDDEN)
    model.model.norm(h)                                   # the hidden hook keeps these rows
    cont = [3, 7, 1]
    got = vllm_worker.fetch(w, ["s"], score={"s": (2, cont)})["s"]
    logits = model.compute_logits(h[1:4]).detach()       # positions n_prompt - 1 .. predict cont
    ent, logsumexp = _reference(logits)
    logp = torch.log_softmax(logits.double(), dim=-1)[torch.arange(3), cont]
    assert np.allclose(got["logprobs"], logp.numpy(), atol=1e-5)
    assert np.allclose(got["entropies"], ent.numpy(), atol=1e-5)
    assert np.allclose(got["logsumexp"], logsumexp.numpy(), atol=1e-5)
