"""Capture one decoder layer's vector during a forward pass: the one definition of both hooks.

- "mlp_out": the output of layer l's MLP sub-module, BEFORE the residual add: SeaKR's official
  vector (its forked vLLM clones the decoder layer's MLP output inside the layer loop).
- "residual": the residual stream AFTER decoder layer l, never passed through the model's final
  norm, at every layer including the last (INSIDE and most probes read this). For l < L-1 it is
  transformers' `output_hidden_states[l + 1]`; `hidden_states[-1]` is its final norm, which would
  change the scale of step 02's layer curve at its last point (docs/vllm.md, "Agreement").

A capture may cut the pass short after layer l (`stop_after`): the layers above cannot change it.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:      # torch only for annotations: step 02's store imports HOOKS without it
    import torch

HOOKS = ("mlp_out", "residual")     # the order of the hooks in step 02's stored arrays too


class _StopForward(Exception):
    """Raised from the hook to abandon the rest of the forward pass once the vector is taken."""


def decoder_layers(model) -> torch.nn.ModuleList:
    """A causal LM's decoder layers (transformers' and vLLM's models)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None and hasattr(model, "get_decoder"):
        layers = model.get_decoder().layers
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no .model.layers: not a decoder-only LM "
                         "this package knows")
    return layers


def hook_module(model, layer: int, hook: str) -> torch.nn.Module:
    layers = decoder_layers(model)
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer {layer} is outside 0..{len(layers) - 1}")
    if hook == "mlp_out":
        return layers[layer].mlp
    if hook == "residual":
        return layers[layer]
    raise ValueError(f"hook must be one of {HOOKS}, not {hook!r}")


def hooked_vector(output, hook: str, deferred_residual: bool = False) -> torch.Tensor:
    """The vector `hook` names, from the forward output of `hook_module`. transformers' decoder
    layers return the stream (or a tuple that starts with it); vLLM's return (hidden, residual) with
    the residual add deferred to the next layer's norm (`deferred_residual`): the stream is their sum."""
    if not isinstance(output, tuple):
        return output
    if hook == "residual" and deferred_residual:
        if len(output) != 2:
            raise ValueError(f"a vLLM decoder layer returned {len(output)} items, not "
                             "(hidden, residual): this model's residual stream is unknown here")
        return output[0] + output[1]
    return output[0]


@contextlib.contextmanager
def capture(model, layer: int, hook: str, stop_after: bool = False) -> Iterator[dict]:
    """A dict whose "out" holds the hooked output (batch x seq x d) after a forward; with
    stop_after, run the forward in `run_until_captured`."""
    box: dict = {}

    def _hook(_module, _inputs, output):
        box["out"] = hooked_vector(output, hook).detach()
        if stop_after:
            raise _StopForward

    handle = hook_module(model, layer, hook).register_forward_hook(_hook)
    try:
        yield box
    finally:
        handle.remove()


def run_until_captured(fn, *args, **kwargs) -> None:
    """Call a forward function, treating the hook's early exit as success."""
    try:
        fn(*args, **kwargs)
    except _StopForward:
        pass
