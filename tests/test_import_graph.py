"""Every module of the package imports, and the package's module-level imports form no circle
(the layering: a module never needs, at import time, one that needs it)."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import seakr_repro

ROOT = Path(seakr_repro.__file__).parent
ENTRY_POINTS = {"seakr_repro.__main__"}   # runs the command line when imported


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("seakr_repro",) + path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _top_level_imports(tree: ast.Module):
    """Import statements that run when the module is imported: module and class bodies, `if`
    (not `if TYPE_CHECKING`), `try` and `with` blocks; never function bodies."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                todo += node.body
            todo += node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            for h in node.handlers:
                todo += h.body
        elif isinstance(node, (ast.With, ast.ClassDef)):
            todo += node.body


def _every_import(tree: ast.Module):
    yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a `from ... import` in `module` (its file `path`) names, relative dots resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    base = package.split(".")
    return ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))


def import_graph(deferred: bool = False, modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    """module -> the package modules it imports at module level (with `deferred`, also inside
    functions); relative imports resolved, `from pkg import name` points at pkg.name when that is
    a module, else at pkg."""
    graph: dict[str, set[str]] = {}
    walk = _every_import if deferred else _top_level_imports
    for name, path in modules.items():
        edges = set()
        for node in walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                mod = _resolve(name, path, node)
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod
                           for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (as a path that returns to its start), or None."""
    state: dict[str, int] = {}          # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_graph_resolves_relative_imports():
    graph = import_graph()
    assert "seakr_repro.llm.model_info" in graph["seakr_repro.llm.hf.backend"]
    assert "seakr_repro.retrieval.base" in graph["seakr_repro.retrieval.index"]
    assert "seakr_repro.core.errors" in graph["seakr_repro.llm.model_info"]


@pytest.mark.parametrize("deferred", [False, True], ids=["module-level", "with-function-bodies"])
def test_no_import_cycles(deferred):
    """No circle, not even through an import inside a function: each module reads as a floor
    above the ones it needs."""
    cycle = find_cycle(import_graph(deferred=deferred))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize("package", ["seakr_repro.llm", "seakr_repro.retrieval"])
def test_backend_packages_need_no_deferred_import_to_avoid_a_circle(package):
    """Inside llm/ and retrieval/ the backends never import back what imports them, not even
    inside a function (registry <-> backends, index <-> its backends were such circles)."""
    graph = {m: {t for t in targets if t.startswith(package + ".")}
             for m, targets in import_graph(deferred=True).items() if m.startswith(package + ".")}
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(set(MODULES) - ENTRY_POINTS))
def test_every_module_imports(name):
    importlib.import_module(name)


# The floors, lowest first: a module imports only from its own floor or below, even inside a
# function, so the folders read as the pipeline. They are written once, in docs/layout.md's table
# "The floors" (a row: | floor | `room/`, `module.py` | ...); the test reads them there.
LAYOUT = ROOT.parent / "docs" / "layout.md"


def floors_of(text: str) -> dict[str, int]:
    """room -> floor, from the floors table of a layout document's text."""
    table = text.split("## The floors", 1)[1]
    floors = {}
    for number, rooms in re.findall(r"^\| (\d+) \| ([^|]+) \|", table, re.M):
        floors |= {room: int(number) for room in re.findall(r"`(\w+)(?:/|\.py)`", rooms)}
    return floors


LAYERS = floors_of(LAYOUT.read_text(encoding="utf-8"))
# core.config checks a profile's data-set names against the data registry when a value is checked
# (the registry imports core: the import waits until then)
UPWARD_ALLOWED = {("seakr_repro.core.config", "seakr_repro.data.registry")}


def _layer(module: str, layers: dict[str, int] = LAYERS) -> int:
    parts = module.split(".")
    return layers[parts[1]] if len(parts) > 1 else 0     # the package root holds only __version__


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int] = LAYERS,
                   allowed: set = frozenset()) -> list[tuple[str, str]]:
    """Each import in `graph` that runs up a floor, less the `allowed` pairs."""
    return sorted((m, t) for m, targets in graph.items() for t in targets
                  if _layer(t, layers) > _layer(m, layers) and (m, t) not in allowed)


def test_the_floors_are_read_from_the_layout_document():
    """Known rows of the table, and the diagram above it saying the same floors."""
    assert LAYERS["core"] == 0 and LAYERS["llm"] == 1 and LAYERS["runs"] == 4
    assert LAYERS["cli"] < LAYERS["__main__"] and max(LAYERS.values()) == LAYERS["__main__"]
    diagram = LAYOUT.read_text(encoding="utf-8").split("## The floors", 1)[0]
    for line in diagram.splitlines():
        if said := re.search(r"\(floor (\d+)", line):
            rooms = re.findall(r"(\w+)(?:/|\.py)", line.split("(floor")[0])
            assert rooms and all(LAYERS[r] == int(said[1]) for r in rooms), line


def test_every_top_level_name_has_a_layer():
    assert {m.split(".")[1] for m in MODULES if "." in m} <= set(LAYERS)


def test_no_import_runs_up_a_layer():
    upward = upward_imports(import_graph(deferred=True), allowed=UPWARD_ALLOWED)
    assert not upward, "imports that run up a layer: " + "; ".join(f"{m} -> {t}" for m, t in upward)


def test_an_upward_import_is_found():
    """A planted fault: core importing the runs inside a function, and a step importing a command."""
    graph = import_graph(deferred=True)
    graph["seakr_repro.core.io"] = graph["seakr_repro.core.io"] | {"seakr_repro.runs.runner"}
    graph["seakr_repro.steps.tables"] = graph["seakr_repro.steps.tables"] | {"seakr_repro.commands.status"}
    assert upward_imports(graph, allowed=UPWARD_ALLOWED) == [
        ("seakr_repro.core.io", "seakr_repro.runs.runner"), ("seakr_repro.steps.tables", "seakr_repro.commands.status")]
    # and an allowed one is not
    assert upward_imports({"seakr_repro.core.config": {"seakr_repro.data.registry"}}, allowed=UPWARD_ALLOWED) == []


def _notebook_imports() -> set[str]:
    """The package modules the notebooks' code cells import."""
    import json
    found = set()
    for nb in sorted((ROOT.parent / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in _every_import(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
                elif isinstance(node, ast.Import):
                    found |= {a.name for a in node.names}
    return found & set(MODULES)


# render's claims ledger is notebook 90's own (render.render_ledger calls it)
STEP_PARTS = {"seakr_repro.steps.claims": "seakr_repro.steps.render"}


def test_steps_holds_notebook_steps_only():
    """Each module of steps/ is one a notebook calls (or a part of one), and steps/ imports no
    notebook step's machinery from elsewhere upward."""
    steps = {m for m in MODULES if m.startswith("seakr_repro.steps.")}
    called = _notebook_imports()
    stray = sorted(m for m in steps if m not in called and STEP_PARTS.get(m) not in called)
    assert not stray, "modules in steps/ that no notebook calls: " + ", ".join(stray)


def test_runs_never_imports_a_step():
    graph = import_graph(deferred=True)
    up = sorted((m, t) for m, targets in graph.items() if m.startswith("seakr_repro.runs")
                for t in targets if t.startswith("seakr_repro.steps"))
    assert not up, "; ".join(f"{m} -> {t}" for m, t in up)


# ------------------------------------------------------------------------------ private names
# A room is a folder (or top-level module) of the package: core, llm, runs, commands, benchmarks,
# card_check, doubles, ... A room that needs another's internals asks for a public name, so a
# leading underscore keeps meaning "only this room relies on it".
def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_attributes(modules: dict[str, Path]) -> dict[str, set[str]]:
    """room -> the private attribute and method names its classes define (`def _x`, `self._x =`,
    a class body's `_x =`)."""
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = out.setdefault(_room(name), set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                        found.add(item.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        found |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.add(node.attr)
    return out


def private_names_across_rooms(modules: dict[str, Path] = MODULES) -> list[str]:
    """Each use of another room's private name: imported by name, read off an imported module, or
    read off an object (not self or cls) where only another room defines that attribute."""
    defined = _own_private_attributes(modules)
    uses = []
    for name, path in modules.items():
        room = _room(name)
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}                # local name -> package module it stands for
        for node in _every_import(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules and a.asname:
                        bound[a.asname] = a.name
                continue
            source = _resolve(name, path, node)
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in modules:
                    bound[a.asname or a.name] = full
                elif source in modules and _room(source) != room and _private(a.name):
                    uses.append(f"{name} imports {source}.{a.name}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in bound:
                if _room(bound[value.id]) != room:
                    uses.append(f"{name} reads {bound[value.id]}.{node.attr}")
            elif not (isinstance(value, ast.Name) and value.id in ("self", "cls")):
                others = [r for r, names in defined.items() if r != room and node.attr in names]
                if others and node.attr not in defined.get(room, set()):
                    uses.append(f"{name} uses {node.attr} (private to {', '.join(sorted(others))})")
    return sorted(set(uses))


def test_no_room_uses_another_rooms_private_names():
    uses = private_names_across_rooms()
    assert not uses, "private names used across rooms (give them a public name): " + "; ".join(uses)


PLANTED = {
    "core/__init__.py": "",
    "core/store.py": "_CACHE = {}\n\nclass Store:\n    def __init__(self):\n        self._rows = []\n",
    "core/other.py": "from . import store\nfrom .store import _CACHE\n\ndef f(s):\n    return store._CACHE, s._rows\n",
    "runs/__init__.py": "",
    "runs/user.py": "from ..core import store\nfrom ..core.store import _CACHE\n\n"
                    "def f(s):\n    return store._CACHE, s._rows, s.__dict__\n",
}


def test_a_private_name_used_across_rooms_is_found(tmp_path):
    """A planted fault: runs/ importing, reading off a module and off an object what only core/
    defines as private (core/ itself may)."""
    modules = {}
    for rel, text in PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
        parts = Path(rel).with_suffix("").parts
        modules[".".join(("seakr_repro",) + (parts[:-1] if parts[-1] == "__init__" else parts))] = tmp_path / rel
    assert private_names_across_rooms(modules) == [
        "seakr_repro.runs.user imports seakr_repro.core.store._CACHE",
        "seakr_repro.runs.user reads seakr_repro.core.store._CACHE",
        "seakr_repro.runs.user uses _rows (private to core)"]
    # relative imports resolve the same way for the graph
    assert import_graph(modules=modules)["seakr_repro.runs.user"] == {"seakr_repro.core.store"}
