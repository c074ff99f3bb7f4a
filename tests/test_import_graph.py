"""Every module of the package imports, and the package's module-level imports form no circle
(the layering: a module never needs, at import time, one that needs it)."""
from __future__ import annotations

import ast
import importlib
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


def import_graph(deferred: bool = False) -> dict[str, set[str]]:
    """module -> the package modules it imports at module level (with `deferred`, also inside
    functions); relative imports resolved, `from pkg import name` points at pkg.name when that is
    a module, else at pkg."""
    graph: dict[str, set[str]] = {}
    walk = _every_import if deferred else _top_level_imports
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod
                           for a in node.names]
            edges |= {t for t in targets if t in MODULES and t != name}
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


# The layers, lowest first: a module imports only from its own layer or below, even inside a
# function, so the folders read as the pipeline: the library, then the runs that answer questions
# at scale, the notebook steps over them, the user's commands, the benchmarks, the step graph and the
# command line over the steps.
LAYERS = {"core": 0, "data": 1, "prompts": 1, "evaluation": 1, "retrieval": 1, "llm": 1,
          "uncertainty": 2, "doubles": 3, "methods": 3, "reporting": 3, "artifacts": 3, "runs": 4,
          "steps": 5, "notebook": 5, "commands": 6, "benchmarks": 6, "rehearsal": 6, "pipeline": 6,
          "step_graph": 6, "cli": 7, "__main__": 8}
# core.config checks a profile's data-set names against the data registry when it loads,
# runner.engine against the engines runs.engine_choice defines and model.decode against the decode
# paths llm.hf.decode.names defines (modules that import nothing heavy, so the schema and the code
# that acts on a setting cannot disagree); each import waits until a value is checked
UPWARD_ALLOWED = {("seakr_repro.core.config", "seakr_repro.data.registry"),
                  ("seakr_repro.core.config", "seakr_repro.runs.engine_choice"),
                  ("seakr_repro.core.config", "seakr_repro.llm.hf.decode.names")}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1]] if len(parts) > 1 else 0     # the package root holds only __version__


def test_every_top_level_name_has_a_layer():
    assert {m.split(".")[1] for m in MODULES if "." in m} <= set(LAYERS)


def test_no_import_runs_up_a_layer():
    upward = sorted((m, t) for m, targets in import_graph(deferred=True).items() for t in targets
                    if _layer(t) > _layer(m) and (m, t) not in UPWARD_ALLOWED)
    assert not upward, "imports that run up a layer: " + "; ".join(f"{m} -> {t}" for m, t in upward)


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


def test_moved_run_modules_keep_their_old_names():
    """A notebook written when the run machinery lived in steps/ still imports it by those names:
    the same module objects, under their own names."""
    import seakr_repro.steps.grid as old_grid
    from seakr_repro.runs import engine, grid
    from seakr_repro.steps.engine import open_backend

    assert old_grid is grid and open_backend is engine.open_backend
    assert grid.__spec__.name == "seakr_repro.runs.grid"


# ------------------------------------------------------------------------------ private names
# A room is a folder (or top-level module) of the package: core, llm, runs, commands, benchmarks,
# rehearsal, doubles, ... A room that needs another's internals asks for a public name, so a
# leading underscore keeps meaning "only this room relies on it".
def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    base = package.split(".")
    return ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))


def _own_private_attributes() -> dict[str, set[str]]:
    """room -> the private attribute and method names its classes define (`def _x`, `self._x =`,
    a class body's `_x =`)."""
    out: dict[str, set[str]] = {}
    for name, path in MODULES.items():
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


def private_names_across_rooms() -> list[str]:
    """Each use of another room's private name: imported by name, read off an imported module, or
    read off an object (not self or cls) where only another room defines that attribute."""
    defined = _own_private_attributes()
    uses = []
    for name, path in MODULES.items():
        room = _room(name)
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}                # local name -> package module it stands for
        for node in _every_import(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in MODULES and a.asname:
                        bound[a.asname] = a.name
                continue
            source = _resolve(name, path, node)
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in MODULES:
                    bound[a.asname or a.name] = full
                elif source in MODULES and _room(source) != room and _private(a.name):
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
