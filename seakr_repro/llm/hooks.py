"""Capture one decoder layer's vector during a forward pass.

SeaKR's official vector is the output of layer l's MLP sub-module BEFORE the residual add
("mlp_out"); INSIDE and most probes use the layer's output, i.e. the residual stream
("residual", equal to `output_hidden_states[l + 1]` for every layer but the last, whose
hidden_states entry has the final norm applied). Forward hooks read either without patching the
model. The capture can also cut the forward pass short after layer l (`stop_after=True`): the
layers above do not influence the vector, so computing them would be wasted work.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

HOOKS = ("mlp_out", "residual")


class _StopForward(Exception):
    """Raised from the hook to abandon the rest of the forward pass once the vector is taken."""


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM (LLaMA, Gemma-3, ...): model.model.layers, else those of
    `get_decoder()`; used by the transformers backend and by the vLLM worker (vLLM's models)."""
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


@contextlib.contextmanager
def capture(model, layer: int, hook: str, stop_after: bool = False) -> Iterator[dict]:
    """Yield a dict whose "out" holds the hooked module's output (batch x seq x d) after a forward.

    With stop_after, run the forward inside `run_until_captured` so the early exit is absorbed.
    """
    box: dict = {}

    def _hook(_module, _inputs, output):
        box["out"] = (output[0] if isinstance(output, tuple) else output).detach()
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
