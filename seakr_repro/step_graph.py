"""When a notebook step is out of date, and why (`reproduce`, `reproduce --dry-run`, `status`).

A step's inputs (artifacts.STEPS declares the graph):
- the source of its code cells (not markdown, outputs or metadata: opening a notebook in the Lab
  changes nothing), the parameters cell aside;
- the parameters it runs with (notebook.effective_parameters: cell, profile, command line);
- the profile's sections it reads;
- the package modules it imports, followed through the package's own imports;
- the shipped data it reads (data/bundled, data/paper);
- the stamps of the steps whose outputs it reads (not every earlier step).
Each is recorded in results/<profile>/stamps/<step>.json when the step finishes; a step is stale
when one differs now, and the differences are the reasons given.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .artifacts import STEPS, Step
from .steps import MOVED
from .core.paths import REPO_ROOT

PACKAGE = "seakr_repro"
IGNORED_SETTINGS = ("description", "profile", "notebooks", "reproduce")   # not inputs of results


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _json_sha(value: Any) -> str:
    return _sha(json.dumps(value, sort_keys=True, default=str).encode())


# ------------------------------------------------------------------ the notebook's code

def code_cells(notebook: Path) -> list[str]:
    """The sources of a notebook's code cells, its parameters cell aside (its values are inputs
    through the effective parameters)."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8")).get("cells", [])
    out = []
    for cell in cells:
        if cell.get("cell_type") != "code" or "parameters" in cell.get("metadata", {}).get("tags", []):
            continue
        source = cell.get("source", "")
        out.append("".join(source) if isinstance(source, list) else source)
    return out


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Modules named by the imports of a parsed file (relative imports resolved against `module`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names.add(target)
            names |= {f"{target}.{a.name}" for a in node.names}    # `from pkg import module`
    return {_MOVED_TO.get(n, n) for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


# A run module's old name under steps/ (steps.MOVED, resolved on request) is that module itself.
_MOVED_TO = {f"{PACKAGE}.steps.{name}": f"{PACKAGE}.runs.{name}" for name in MOVED}


@functools.lru_cache(maxsize=4)
def package_modules(root: Path = REPO_ROOT) -> dict[str, Path]:
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = (PACKAGE,) + path.relative_to(root / PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


@functools.lru_cache(maxsize=4)
def _import_graph(root: Path = REPO_ROOT) -> dict[str, frozenset[str]]:
    """module -> the package modules it imports anywhere in its body (inside functions too); a
    module that imports by name (importlib) depends on every module of its package."""
    modules = package_modules(root)
    graph = {}
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        targets = {t for t in _imported(ast.parse(text), name, path.name == "__init__.py") if t in modules}
        if "import_module(" in text and name != f"{PACKAGE}.steps":   # steps: the old names, above
            package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
            targets |= {m for m in modules if m.startswith(package + ".")}
        graph[name] = frozenset(targets - {name})
    return graph


def imported_modules(sources: list[str], root: Path = REPO_ROOT) -> list[Path]:
    """The package files `sources` (notebook code) run: what they import, followed through the
    package's imports, with the __init__ of every package on the way."""
    modules, graph = package_modules(root), _import_graph(root)
    todo = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:           # IPython magics: the file is still hashed as code
            continue
        todo |= {m for m in _imported(tree, "__main__", False) if m in modules}
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo |= {".".join(parts[:i]) for i in range(1, len(parts))} - seen    # parent packages
        todo |= graph.get(name, frozenset()) - seen
    return sorted(modules[m] for m in seen)


def _file_digests(paths: list[Path], root: Path = REPO_ROOT) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _sha(p.read_bytes()) for p in paths}


def _shipped_digest(folder: str, root: Path = REPO_ROOT) -> str:
    files = sorted(p for p in (root / "data" / folder).rglob("*") if p.is_file())
    return _sha(b"".join(p.relative_to(root).as_posix().encode() + hashlib.sha256(p.read_bytes()).digest()
                         for p in files))


# ------------------------------------------------------------------ one step's inputs

def declaration(name: str, earlier: list[str]) -> Step:
    """The step's declaration; a notebook without one (a new step) reads every earlier step, every
    setting and all shipped data, so it is never wrongly up to date."""
    return STEPS.get(name) or Step(name, tuple(earlier), None, ("bundled", "paper"))


def step_inputs(notebook: Path, settings: Mapping[str, Any], parameters: Mapping[str, Any],
                inputs: Mapping[str, str | None], step: Step) -> dict:
    """Everything a step's results depend on, by kind (what its stamp records)."""
    sources = code_cells(notebook)
    sections = [k for k in settings if k not in IGNORED_SETTINGS and (step.settings is None or k in step.settings)]
    return {"code": _sha("\n\0".join(sources).encode()),
            "parameters": json.loads(json.dumps(dict(parameters), default=str)),
            "settings": {k: _json_sha(settings[k]) for k in sorted(sections)},
            "modules": _file_digests(imported_modules(sources)),
            "shipped": {f"data/{f}": _shipped_digest(f) for f in step.shipped},
            "inputs": dict(inputs)}


def digest(recorded: Mapping) -> str:
    """The stamp a step's dependants record for it."""
    return _json_sha({k: recorded[k] for k in ("code", "parameters", "settings", "modules", "shipped", "inputs")})


def _changed(old: Mapping, new: Mapping) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def reasons(recorded: Mapping | None, now: Mapping) -> list[str]:
    """Why a step with stamp `recorded` is out of date given its inputs `now` ([]: up to date)."""
    if not recorded:
        return ["it has not run yet"]
    if "code" not in recorded:
        return ["its stamp is from an older reproduce that did not record the step's inputs"]
    out = []
    if recorded["code"] != now["code"]:
        out.append("its code cells changed")
    params = _changed(recorded.get("parameters", {}), now["parameters"])
    if params:
        out.append("parameters " + ", ".join(
            f"{k} {recorded['parameters'].get(k, '-')!r} -> {now['parameters'].get(k, '-')!r}" for k in params))
    for kind, what in (("settings", "profile settings it reads changed"),
                       ("modules", "package code it imports changed"),
                       ("shipped", "shipped data it reads changed")):
        changed = _changed(recorded.get(kind, {}), now[kind])
        if changed:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            out.append(f"{what}: {shown}")
    ups = _changed(recorded.get("inputs", {}), now["inputs"])
    if ups:
        out.append("a step it reads ran again or will: " + ", ".join(ups))
    return out


@dataclass
class Planned:
    name: str
    action: str                          # run | up-to-date | skipped (not selected by --only)
    reasons: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
