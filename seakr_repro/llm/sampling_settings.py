"""The settings of a `sample` call, `Sampling`, with SeaKR's official defaults (params/base.yaml
states them too; a test keeps the two equal); the call cache keys on `key_params`. No torch."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

from ..core.errors import UserError
from .hooks import HOOKS
from .model_info import middle_layer
from .stops import check_forced_eos


@dataclass(frozen=True, kw_only=True)
class Sampling:
    max_new_tokens: int
    k: int = 20
    stop: Sequence[str] = ()
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 0.9
    seed: int = 42
    layer: int | str | None = None   # the forced-EOS vector's decoder layer, 0-based; None or "middle": L/2 - 1
    hook: str = "mlp_out"        # where in that layer (`llm.hooks.HOOKS`)
    forced_eos: str = "append"   # which tokens precede the forced EOS (`stops.forced_eos_ids`)
    want_stats: bool = False     # each token's entropy and logsumexp too; not part of the cache key

    def __post_init__(self):
        # values are kept as given (no int() or float()): the cache key is their JSON
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.hook not in HOOKS:
            raise UserError(f"unknown hook {self.hook!r}", setting="uncertainty.hook",
                            fix=f"use one of {', '.join(HOOKS)}")
        check_forced_eos(self.forced_eos)
        if not (self.layer in (None, "middle") or isinstance(self.layer, int) and self.layer >= 0):
            raise UserError(f"layer {self.layer!r} is not a decoder layer", setting="uncertainty.layer",
                            fix="use a 0-based layer number or middle")

    def at_layer(self, n_layers: int) -> "Sampling":
        """These settings for a model of `n_layers` layers: the layer resolved and checked."""
        layer = middle_layer(n_layers) if self.layer in (None, "middle") else self.layer
        if layer >= n_layers:
            raise UserError(f"layer {layer} is outside the model's layers 0..{n_layers - 1}",
                            setting="uncertainty.layer", fix=f"use a layer below {n_layers} or middle")
        return replace(self, layer=layer)

    def key_params(self) -> dict:
        """The parameters of a call cache key: every setting but `want_stats`, stop as a list."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "want_stats"}
        return {**out, "stop": list(self.stop)}

