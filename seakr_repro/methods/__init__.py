"""The QA methods behind one interface: `Method.run(record) -> MethodResult` (methods.base).

`build_method(name, backend, searcher, dataset, **overrides)` makes one of those `artifacts.METHODS`
declares; `method_class(name)` is its class. A method's module is imported when it is first built.
"""
from __future__ import annotations

import importlib


def method_class(name: str) -> type | None:
    """The class of method `name` (an alias accepted), None for an undeclared name."""
    from ..artifacts import find_method

    spec = find_method(name)
    if spec is None:
        return None
    module, _, cls = spec.cls.partition(":")
    return getattr(importlib.import_module(module), cls)


def build_method(name: str, backend, searcher, dataset: str, **overrides):
    """The method `name` for `dataset`, its defaults updated by `overrides` (SKR's fit on labelled
    training questions: `labelled=`, `encoder=`)."""
    cls = method_class(name)
    if cls is None:
        from ..artifacts import METHODS
        from ..core.errors import UserError
        raise UserError(f"unknown method '{name}'", setting="method", fix=f"use one of {', '.join(METHODS)}")
    fitted = {k: overrides.pop(k) for k in ("labelled", "encoder") if k in overrides}
    return cls(backend, searcher, dataset, overrides, **fitted)
