"""Profiles: params/<profile>.yaml layered on params/base.yaml, resolved into one hashable config.

A profile file may name `extends: other` to start from another profile. Overrides from the command
line or a notebook's parameters cell are dotted keys (`uncertainty.k=5`). A profile's `gpu:`
section holds settings (any of base.yaml's) that replace the profile's own when `model.device`
resolves to CUDA on the machine loading it (auto with a GPU, or cuda): the default profile's CPU
sizes give way to full ones there. A profile extending it and the overrides still win over it.

Settings are checked when loaded: params/base.yaml is the schema. Every key of a profile file or an
override must exist there, and its value must have the type of base.yaml's value (or the types
declared in `DECLARED_TYPES` where base.yaml's value is null or one of several kinds). A typo ends
with one paragraph naming the key, the file and line, and the nearest known key."""
from __future__ import annotations

import ast
import copy
import difflib
import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from .errors import UserError
from .paths import NOTEBOOKS_DIR, PARAMS_DIR
from .setting_choices import DECODE_SETTINGS, ENGINES

# Keys a profile file may hold besides base.yaml's: set by the loader, or naming the parent profile.
META_KEYS = ("extends", "profile")

# The section of settings applied over the profile's when model.device resolves to CUDA.
GPU_SECTION = "gpu"


# Types of the settings whose base.yaml value cannot tell (null, or an int or a word). An entry is
# a tuple of a type, None (null allowed) or a literal string (that exact word allowed).
DECLARED_TYPES: dict[str, tuple] = {
    "model.path": (str, None),
    "model.max_batch_rows": (int, None),
    "model.max_batch_contexts": (int, None),
    "model.decode": DECODE_SETTINGS,
    "model.vllm.tensor_parallel_size": (int, "auto"),
    "model.vllm.max_model_len": (int, None),
    "model.vllm.max_num_seqs": (int, None),
    "model.vllm.block_size": (int, None),
    "datasets.n_questions": (int, None),
    "uncertainty.layer": (int, "middle"),
    "baselines.n_shot": (int, None),
    "baselines.max_new_tokens": (int, None),
    "baselines.max_steps": (int, None),
    "baselines.dtype": ("float32", "bfloat16", "float16", None),
    "baselines.dtype_when_too_large": ("bfloat16", "float16", None),
    "baselines.decoding": ("checkpoint", "greedy", None),
    "analysis.datasets": (list, None),
    "analysis.n_questions": (int, None),
    "seakr.simple_qa_passages_path": (str, None),
    "reproduce.cell_timeout": (int, float, None),
    "runner.engine": tuple(ENGINES),
    "skr.ties": ("discard", "known"),
    "skr.label_answer": ("official", "package"),
    "skr.knn_rule": ("official", "paper", "majority"),
    "skr.pooling": ("pooler", "mean"),
    "self_rag.passages": ("index", "input"),
    "runner.workers": (int, "auto"),
}

# Sections whose keys are not fixed by base.yaml: model name -> local directory; notebook name ->
# {parameter: value} (checked against the notebooks and their `parameters` cells).
OPEN_MAPPINGS = ("model.paths", "notebooks", "skr.train_results", "self_rag.input_files")

# ... of them, those keyed by data set name: what each value is, and what to give
_DATASET_PATHS = {
    "skr.train_results": ("SKR results directory", "the directory holding cot_train.json and cot_train_ir.json"),
    "self_rag.input_files": ("Self-RAG input file", "the path of a run_short_form.py input file "
                                                    "(questions with their ctxs)"),
}

# Lists of data set names (checked against the data set registry).
DATASET_LISTS = ("datasets.complex", "datasets.simple", "analysis.datasets")


def list_profiles(params_dir: str | Path | None = None) -> tuple[str, ...]:
    params_dir = Path(params_dir) if params_dir else PARAMS_DIR
    return tuple(sorted(p.stem for p in params_dir.glob("*.yaml") if p.stem != "base"))


# ---------------------------------------------------------------- checking settings against base.yaml

_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a section of key: value lines", None: "null"}


def _kind_name(kind) -> str:
    if isinstance(kind, str):
        return repr(kind)
    return _KIND_NAMES.get(kind, getattr(kind, "__name__", str(kind)))


def _value_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return _KIND_NAMES[type(value)]
    return f"{_KIND_NAMES.get(type(value), type(value).__name__)} ({value!r})"


def _fits(value, kind) -> bool:
    if kind is None:
        return value is None
    if isinstance(kind, str):
        return value == kind
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):          # YAML's true is not a number
        return False
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


@dataclass
class _Source:
    """Where settings came from: a profile file (with the line of each dotted key) or an override."""

    label: str
    path: Path | None = None
    lines: dict = field(default_factory=dict)
    prefix: str = ""                     # "gpu.": the settings checked are inside that section

    def within(self, section: str) -> "_Source":
        return _Source(self.label, self.path, self.lines, f"{self.prefix}{section}.")

    def error(self, dotted: str, what: str, fix: str) -> UserError:
        dotted = self.prefix + dotted
        line = None
        parts = dotted.split(".")
        while parts and line is None:            # the key's own line, else its section's
            line = self.lines.get(".".join(parts))
            parts.pop()
        if self.path is not None:
            return UserError(what, fix=fix, path=self.path, line=line, setting=dotted)
        return UserError(f"{what} (given as {self.label})", fix=fix, setting=dotted)


def _flat_keys(node: Mapping, prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        out.append(prefix + str(key))
        if isinstance(value, dict) and prefix + str(key) not in OPEN_MAPPINGS:
            out += _flat_keys(value, f"{prefix}{key}.")
    return out


def _suggest(dotted: str, known: list[str]) -> str:
    """'did you mean uncertainty.k?': same last part first, else the closest spelling."""
    leaf = dotted.rsplit(".", 1)[-1]
    same_leaf = [k for k in known if k.rsplit(".", 1)[-1] == leaf]
    close = same_leaf or difflib.get_close_matches(dotted, known, n=1, cutoff=0.6) or [
        k for k in known if k.rsplit(".", 1)[-1] in difflib.get_close_matches(
            leaf, [x.rsplit(".", 1)[-1] for x in known], n=1, cutoff=0.75)]
    return f"write {close[0]}, the nearest known setting" if close else ""


class _Checker:
    def __init__(self, schema: dict, notebooks_dir: Path = NOTEBOOKS_DIR):
        self.schema, self.notebooks_dir = schema, notebooks_dir
        self.known = _flat_keys(schema)

    def unknown(self, dotted: str, src: _Source, full: str | None = None) -> UserError:
        """`dotted` is not in base.yaml (`full`: the whole key it starts, for an override)."""
        full = full or dotted
        what = f"unknown setting '{full}'"
        if full != dotted:
            what += f" (params/base.yaml has no '{dotted}')"
        rule = ("every setting must exist in params/base.yaml; a new one is added there with a "
                "one-line comment")
        hint = _suggest(full, self.known)
        return src.error(full, what, f"{hint} ({rule})" if hint else rule)

    def check_profile(self, data: Mapping, src: _Source) -> None:
        for key, value in data.items():
            if key in META_KEYS:
                if not isinstance(value, str):
                    raise src.error(key, f"'{key}' is {_value_name(value)}, not a profile name",
                                    "write a profile name, e.g. extends: paper")
                continue
            self.check(str(key), value, src)

    def check(self, dotted: str, value, src: _Source) -> None:
        """One dotted setting (`uncertainty.k`, or a section such as `model`) and its value."""
        parts = dotted.split(".")
        if dotted in META_KEYS:
            return
        if parts[0] == GPU_SECTION:
            return self._check_gpu(".".join(parts[1:]), value, src)
        node: Any = self.schema
        for i, part in enumerate(parts):
            prefix = ".".join(parts[:i + 1])
            if prefix in OPEN_MAPPINGS:
                for inner in reversed(parts[i + 1:]):
                    value = {inner: value}
                return self._check_open(prefix, value, src)
            if not isinstance(node, dict) or part not in node:
                raise self.unknown(prefix, src, dotted)
            node = node[part]
        self._check_value(dotted, value, node, src)

    def _check_gpu(self, inner: str, value, src: _Source) -> None:
        """`gpu` (a section of settings) or `gpu.<setting>`: each checked as a profile's own."""
        if src.prefix:
            raise src.error(GPU_SECTION, "a gpu section inside the gpu section",
                            "write the GPU settings directly under the profile's gpu: section")
        settings = {inner: value} if inner else value
        if settings is None:
            return
        if not isinstance(settings, dict):
            raise src.error(GPU_SECTION, f"'{GPU_SECTION}' is {_value_name(settings)}, but it must be "
                            "a section of settings", "write settings under it, e.g. gpu: {uncertainty: {k: 20}}")
        for key, sub in settings.items():
            if str(key) == "model.device" or (str(key) == "model" and isinstance(sub, dict)
                                               and "device" in sub):
                raise src.error(f"{GPU_SECTION}.model.device", "the gpu section cannot set "
                                "model.device: it applies once model.device has resolved to cuda",
                                "set model.device in the profile itself")
            self.check(str(key), sub, src.within(GPU_SECTION))

    def _check_value(self, dotted: str, value, base_value, src: _Source) -> None:
        if dotted in OPEN_MAPPINGS:
            return self._check_open(dotted, value, src)
        if isinstance(base_value, dict) and dotted not in DECLARED_TYPES:
            if not isinstance(value, dict):
                raise src.error(dotted, f"'{dotted}' is a section, but it is given {_value_name(value)}",
                                f"set its keys one by one, e.g. {_example(dotted, base_value)}")
            for key, sub in value.items():
                inner = f"{dotted}.{key}"
                if key not in base_value and inner not in OPEN_MAPPINGS:
                    raise self.unknown(inner, src)
                self._check_value(inner, sub, base_value.get(key), src)
            return
        # a null in base.yaml with no declared type: any value
        kinds = DECLARED_TYPES.get(dotted, () if base_value is None else (type(base_value),))
        if kinds and not any(_fits(value, k) for k in kinds):
            wanted = " or ".join(_kind_name(k) for k in kinds)
            raise src.error(dotted, f"'{dotted}' is {_value_name(value)}, but it must be {wanted}",
                            f"give {wanted} (params/base.yaml has {dotted}: "
                            f"{json.dumps(base_value)})")
        if isinstance(value, list) and isinstance(base_value, list) and base_value:
            item_kind = type(base_value[0])
            bad = [v for v in value if not _fits(v, item_kind)]
            if bad:
                raise src.error(dotted, f"'{dotted}' holds {_value_name(bad[0])}, but its items "
                                f"must be {_kind_name(item_kind)}", f"write a list such as "
                                f"{json.dumps(base_value)}")
        if dotted in DATASET_LISTS and isinstance(value, list):
            _check_dataset_names(dotted, value, src)

    def _check_open(self, dotted: str, value, src: _Source) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise src.error(dotted, f"'{dotted}' is {_value_name(value)}, but it must be a mapping",
                            "write name: value lines under it, or {} for none")
        if dotted == "model.paths":
            for name, where in value.items():
                if not (where is None or isinstance(where, str)):
                    raise src.error(f"{dotted}.{name}", f"the directory of model '{name}' is "
                                    f"{_value_name(where)}", "give the model's local directory as a string")
            return
        if dotted in _DATASET_PATHS:     # data set -> a path the user gives
            _check_dataset_names(dotted, list(value), src)
            for name, where in value.items():
                if not isinstance(where, str):
                    raise src.error(f"{dotted}.{name}", f"the {_DATASET_PATHS[dotted][0]} of '{name}' is "
                                    f"{_value_name(where)}", f"give {_DATASET_PATHS[dotted][1]} as a string")
            return
        if not Path(self.notebooks_dir).is_dir():     # the package without its notebooks
            return
        known = notebook_names(self.notebooks_dir)
        for name, params in value.items():
            inner = f"{dotted}.{name}"
            if name not in known:
                close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.5)
                raise src.error(inner, f"there is no notebook '{name}' in {self.notebooks_dir}",
                                (f"did you mean {close[0]}? " if close else "") +
                                "use a notebook's name without .ipynb" + (f", e.g. {known[0]}" if known else ""))
            if params is None:
                continue
            if not isinstance(params, dict):
                raise src.error(inner, f"the parameters of notebook '{name}' are {_value_name(params)}",
                                "give a mapping such as {N_QUESTIONS: 5}")
            allowed = notebook_parameters(self.notebooks_dir / f"{name}.ipynb")
            for param in params:
                if param not in allowed:
                    close = difflib.get_close_matches(str(param), sorted(allowed), n=1, cutoff=0.5)
                    raise src.error(f"{inner}.{param}", f"notebook '{name}' has no parameter '{param}'",
                                    (f"did you mean {close[0]}? " if close else "") +
                                    "its parameters cell defines " + ", ".join(sorted(allowed)))


def _example(dotted: str, section: Mapping) -> str:
    key = next(iter(section), "key")
    return f"{dotted}.{key}={json.dumps(section.get(key))}"


def _check_dataset_names(dotted: str, names: list, src: _Source) -> None:
    from ..data.registry import DATASETS

    for name in names:
        if name not in DATASETS:
            close = difflib.get_close_matches(str(name), list(DATASETS), n=1, cutoff=0.5)
            raise src.error(dotted, f"'{dotted}' names the unknown data set '{name}'",
                            (f"did you mean {close[0]}? " if close else "") +
                            "known data sets: " + ", ".join(DATASETS))


def notebook_names(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[str]:
    return sorted(p.stem for p in Path(notebooks_dir).glob("*.ipynb"))


def notebook_parameters(path: Path) -> frozenset[str]:
    """Names assigned in the notebook's cell tagged `parameters` (what papermill can set)."""
    return _notebook_parameters(Path(path), Path(path).stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _notebook_parameters(path: Path, mtime_ns: int) -> frozenset[str]:
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    names = set()
    for cell in cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = "".join(cell.get("source", []))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(names)


def _key_lines(text: str) -> dict[str, int]:
    """{dotted key: 1-based line} of a YAML mapping, to point at the offending line."""
    lines: dict[str, int] = {}

    def walk(node, prefix):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    dotted = prefix + key.value
                    lines.setdefault(dotted, key.start_mark.line + 1)
                    walk(value, dotted + ".")

    try:
        walk(yaml.compose(text), "")
    except yaml.YAMLError:
        pass
    return lines


def _deep_merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_yaml(path: Path) -> tuple[dict, dict[str, int]]:
    """The file's mapping and the line of each of its dotted keys."""
    if not path.is_file():
        known = list_profiles(path.parent)
        raise UserError("profile file not found", path=path,
                        fix=f"use one of {', '.join(known)} or create {path.name}")
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise UserError(f"invalid YAML ({getattr(e, 'problem', e)})", path=path,
                        line=line + 1 if line is not None else None,
                        fix="correct the YAML syntax at that line") from None
    if not isinstance(data, dict):
        raise UserError("a profile must be a YAML mapping", path=path, fix="use key: value lines")
    return data, _key_lines(text)


def _checker(params_dir: Path) -> _Checker:
    base = params_dir / "base.yaml"
    return _cached_checker(base, base.stat().st_mtime_ns if base.is_file() else 0)


@functools.lru_cache(maxsize=8)
def _cached_checker(base: Path, mtime_ns: int) -> _Checker:
    schema, lines = _load_yaml(base)
    checker = _Checker(schema)
    checker.check_profile(schema, _Source("params/base.yaml", base, lines))   # declared types hold
    return checker


def _resolve(name: str, params_dir: Path, seen: tuple = (), gpu: bool = False) -> dict:
    """The profile's settings over those of the profiles it extends. With `gpu`, each file's gpu:
    section is applied over that file's settings and its parents' (a profile extending it then
    overrides them as it overrides any setting: smoke keeps its tiny sizes on a GPU)."""
    if name in seen:
        raise UserError(f"profile '{name}' extends itself through {' -> '.join(seen)}",
                        path=params_dir / f"{name}.yaml", fix="remove the cycle in `extends`")
    path = params_dir / f"{name}.yaml"
    data, lines = _load_yaml(path)
    _checker(params_dir).check_profile(data, _Source(path.name, path, lines))
    parent = data.pop("extends", "base" if name != "base" else None)
    base = _resolve(parent, params_dir, seen + (name,), gpu) if parent else {}
    merged = _deep_merge(base, data)
    return _deep_merge(merged, data.get(GPU_SECTION) or {}) if gpu else merged


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=3' -> ('a.b', 3); the value is parsed as YAML so numbers, lists and null work."""
    if "=" not in text:
        raise UserError(f"override '{text}' has no '='", setting=text, fix="write key.sub=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise UserError(f"the value of override '{text}' is not valid YAML ({getattr(e, 'problem', e)})",
                        setting=key.strip(), fix="quote it, e.g. key='text with: colon'") from None
    return key.strip(), value


@dataclass(frozen=True)
class Config:
    """One resolved profile. `cfg["a.b"]` reads a dotted key; `cfg.hash` identifies the content."""

    profile: str
    data: dict = field(repr=False)
    params_dir: Path = field(default=PARAMS_DIR, repr=False, compare=False)

    def __getitem__(self, dotted: str) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise UserError(f"setting '{dotted}' is missing from profile '{self.profile}'",
                                setting=dotted, path=self.params_dir / f"{self.profile}.yaml",
                                fix="add it to the profile or to params/base.yaml")
            node = node[part]
        return node

    def get(self, dotted: str, default: Any = None) -> Any:
        try:
            return self[dotted]
        except UserError:
            return default

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "an override") -> "Config":
        """A copy with {dotted key: value} applied, each checked against params/base.yaml first."""
        checker = _checker(self.params_dir)
        data = copy.deepcopy(self.data)
        for dotted, value in overrides.items():
            if str(dotted).split(".")[0] == GPU_SECTION:
                raise _Source(source).error(str(dotted), "an override cannot set the gpu section (it "
                                            "is applied when the profile is loaded)",
                                            "set the setting itself, e.g. uncertainty.k=20, or "
                                            "model.device=cpu to keep the profile's CPU settings")
            checker.check(str(dotted), value, _Source(source))
            node = data
            parts = str(dotted).split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise UserError(f"cannot set '{dotted}': '{part}' is not a section",
                                    setting=dotted, fix="check the key path")
            node[parts[-1]] = value
        return Config(self.profile, data, self.params_dir)

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
                params_dir: str | Path | None = None, source: str = "--set") -> Config:
    """The profile's settings; then SEAKR_OVERRIDES (set by `reproduce --set` for the notebooks
    it runs), then `overrides` (`source` names where they came from in error messages)."""
    params_dir = Path(params_dir) if params_dir else PARAMS_DIR
    env = env_overrides()

    def load(gpu: bool) -> Config:
        data = _resolve(profile, params_dir, gpu=gpu)
        data["profile"] = profile
        cfg = Config(profile, data, params_dir)
        if env:
            cfg = cfg.with_overrides(env, source=f"{OVERRIDES_ENV} (set by `reproduce --set`)")
        return cfg.with_overrides(overrides, source=source) if overrides else cfg

    cfg = load(gpu=False)
    if cfg.get(GPU_SECTION) and on_gpu(cfg["model.device"]):   # the GPU sizes, under the overrides
        cfg = load(gpu=True)
    return cfg


def on_gpu(device: str) -> bool:
    """Whether a `model.device` setting runs on CUDA here (cuda as asked, or auto with a GPU)."""
    if device == "auto":
        from .device import cuda_available
        return cuda_available()
    return device == "cuda"


def env_json_object(name: str, example: str, what: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in environment variable `name` ({} when unset or empty); a value that is
    not one stops with the variable named and `example` as the fix."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UserError(f"{name} is not valid JSON ({e})", setting=name,
                        fix=f"unset it, or give an object such as {example}") from None
    if not isinstance(value, dict):
        raise UserError(f"{name} must be {what}", setting=name, fix=f"e.g. {example}")
    return value


def env_overrides() -> dict[str, Any]:
    return env_json_object(OVERRIDES_ENV, '{"model.backend": "vllm"}', "a JSON object of dotted keys")
