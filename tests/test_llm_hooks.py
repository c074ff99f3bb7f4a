"""`llm.hooks.hooked_vector`: the one reading of a hooked module's output for both backends."""
from __future__ import annotations

import pytest
import torch

from seakr_repro.llm.hooks import hooked_vector


def test_vllm_layers_give_the_stream_as_hidden_plus_deferred_residual():
    h, res = torch.randn(5, 8), torch.randn(5, 8)
    assert torch.equal(hooked_vector((h, res), "residual", deferred_residual=True), h + res)
    # the MLP's own output is a tensor: read as it is
    assert hooked_vector(h, "mlp_out", deferred_residual=True) is h
    with pytest.raises(ValueError, match="residual stream is unknown"):
        hooked_vector((h, res, res), "residual", deferred_residual=True)


def test_transformers_layers_give_the_stream_first():
    h, extra = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    assert hooked_vector((h, extra), "residual") is h        # e.g. (stream, attention weights)
    assert hooked_vector(h, "residual") is h
