"""The logit warper must equal transformers' temperature -> top-k -> top-p chain exactly."""
import pytest
import torch

from seakr_repro.llm.sampling import warp_logits


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 50, 0.9), (0.5, 10, 0.95),
                                                     (1.3, 0, 0.8), (0.7, 5, 1.0)])
def test_warp_matches_transformers(temperature, top_k, top_p):
    from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 300, generator=g) * 3
    chain = [TemperatureLogitsWarper(temperature)]
    if top_k:
        chain.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p))
    want = LogitsProcessorList(chain)(torch.zeros(4, 1, dtype=torch.long), logits.clone())
    got = warp_logits(logits, temperature, top_k, top_p)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got[~torch.isinf(got)], want[~torch.isinf(want)])
    kept = (~torch.isinf(got)).sum(-1)
    assert (kept >= 1).all() and (not top_k or (kept <= top_k).all())


def test_top_p_keeps_the_top_token_when_it_alone_exceeds_p():
    logits = torch.tensor([[10.0, 0.0, 0.0, 0.0]])
    got = warp_logits(logits, 1.0, 0, 0.5)
    assert torch.isfinite(got[0, 0]) and torch.isinf(got[0, 1:]).all()
