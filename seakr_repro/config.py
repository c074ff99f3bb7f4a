"""Profiles: params/<profile>.yaml layered on params/base.yaml, resolved into one hashable config.

A profile file may name `extends: other` to start from another profile. Overrides from the command
line or a notebook's parameters cell are dotted keys (`uncertainty.k=5`).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from .errors import UserError
from .paths import PARAMS_DIR

PROFILES = ("smoke", "default", "paper")


def _deep_merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_yaml(path: Path) -> dict:
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise UserError(f"profile file not found", path=path,
                        fix=f"use one of {', '.join(known)} or create {path.name}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise UserError(f"invalid YAML ({getattr(e, 'problem', e)})", path=path,
                        line=line + 1 if line is not None else None,
                        fix="correct the YAML syntax at that line") from None
    if not isinstance(data, dict):
        raise UserError("a profile must be a YAML mapping", path=path, fix="use key: value lines")
    return data


def _resolve(name: str, params_dir: Path, seen: tuple = ()) -> dict:
    if name in seen:
        raise UserError(f"profile '{name}' extends itself through {' -> '.join(seen)}",
                        path=params_dir / f"{name}.yaml", fix="remove the cycle in `extends`")
    data = _load_yaml(params_dir / f"{name}.yaml")
    parent = data.pop("extends", "base" if name != "base" else None)
    base = _resolve(parent, params_dir, seen + (name,)) if parent else {}
    return _deep_merge(base, data)


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=3' -> ('a.b', 3); the value is parsed as YAML so numbers, lists and null work."""
    if "=" not in text:
        raise UserError(f"override '{text}' has no '='", setting=text, fix="write key.sub=value")
    key, raw = text.split("=", 1)
    return key.strip(), yaml.safe_load(raw)


@dataclass(frozen=True)
class Config:
    """One resolved profile. `cfg["a.b"]` reads a dotted key; `cfg.hash` identifies the content."""

    profile: str
    data: dict = field(repr=False)

    def __getitem__(self, dotted: str) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise UserError(f"setting '{dotted}' is missing from profile '{self.profile}'",
                                setting=dotted, path=PARAMS_DIR / f"{self.profile}.yaml",
                                fix=f"add it to the profile or to params/base.yaml")
            node = node[part]
        return node

    def get(self, dotted: str, default: Any = None) -> Any:
        try:
            return self[dotted]
        except UserError:
            return default

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Config":
        data = copy.deepcopy(self.data)
        for dotted, value in overrides.items():
            node = data
            parts = dotted.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise UserError(f"cannot set '{dotted}': '{part}' is not a section",
                                    setting=dotted, fix="check the key path")
            node[parts[-1]] = value
        return Config(self.profile, data)

    def section_hash(self, *sections: str) -> str:
        """A short hash of the named sections (all of them when none are named)."""
        part = {s: self.get(s) for s in sections} if sections else self.data
        blob = json.dumps(part, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    @property
    def hash(self) -> str:
        return self.section_hash()

    def to_dict(self) -> dict:
        return copy.deepcopy(self.data)


OVERRIDES_ENV = "SEAKR_OVERRIDES"   # JSON {dotted key: value}: `reproduce --set` for the notebooks


def load_config(profile: str = "default", overrides: Mapping[str, Any] | None = None,
                params_dir: str | Path | None = None) -> Config:
    """The profile's settings; then SEAKR_OVERRIDES (set by `reproduce --set` for the notebooks
    it runs), then `overrides`."""
    params_dir = Path(params_dir) if params_dir else PARAMS_DIR
    data = _resolve(profile, params_dir)
    data["profile"] = profile
    cfg = Config(profile, data)
    merged = {**env_overrides(), **(overrides or {})}
    return cfg.with_overrides(merged) if merged else cfg


def env_overrides() -> dict[str, Any]:
    raw = os.environ.get(OVERRIDES_ENV, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UserError(f"{OVERRIDES_ENV} is not valid JSON ({e})", setting=OVERRIDES_ENV,
                        fix='unset it, or give an object such as {"model.backend": "vllm"}') from None
    if not isinstance(value, dict):
        raise UserError(f"{OVERRIDES_ENV} must be a JSON object of dotted keys",
                        setting=OVERRIDES_ENV, fix='e.g. {"model.backend": "vllm"}')
    return value
