"""The QA methods behind one interface: `Method.run(record) -> MethodResult`.

`build_method(name, backend, searcher, dataset, **overrides)` makes one; `METHODS` lists them.
"""
from __future__ import annotations

from ..core.errors import UserError
from .base import BASELINE_TABLE, Method, MethodResult
from .cot import CoT
from .dragin import DRAGIN
from .flare import FLARE
from .ircot import IRCoT
from .seakr.method import SeaKR
from .self_rag import SelfRAG
from .taikc.method import TAIKC, TAIKCKBAE

METHODS: dict[str, type[Method]] = {
    "cot": CoT, "ircot": IRCoT, "flare": FLARE, "dragin": DRAGIN, "self_rag": SelfRAG,
    "seakr": SeaKR, "taikc": TAIKC, "taikc-kbae": TAIKCKBAE,
}
_ALIASES = {"self-rag": "self_rag", "selfrag": "self_rag"}
SKR_VARIANTS = ("skr-prompt", "skr-icl", "skr-cls", "skr-knn")


def method_class(name: str) -> type[Method] | None:
    """The class of method `name` (SKR's variants included), None for an unknown name."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key in SKR_VARIANTS:
        from .skr.method import SKR_METHODS
        return SKR_METHODS[key]
    return METHODS.get(key)


def build_method(name: str, backend, searcher, dataset: str, **overrides) -> Method:
    """The method `name` for `dataset`, its defaults updated by `overrides`."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key in SKR_VARIANTS:   # SKR fits on labelled training questions: `labelled=`, `encoder=`
        from .skr.method import build_skr
        return build_skr(key, backend, searcher, dataset, **overrides)
    if key not in METHODS:
        raise UserError(f"unknown method '{name}'", setting="method",
                        fix=f"use one of {', '.join([*METHODS, *SKR_VARIANTS])}")
    return METHODS[key](backend, searcher, dataset, overrides)


__all__ = ["BASELINE_TABLE", "METHODS", "Method", "MethodResult", "build_method", "method_class", "CoT", "IRCoT",
           "FLARE", "DRAGIN", "SelfRAG", "SeaKR", "TAIKC", "TAIKCKBAE"]
