"""When a notebook step is out of date, and why (`reproduce`, `reproduce --dry-run`, `status`).

A step's inputs (artifacts.STEPS declares the graph) are its code cells, effective parameters,
profile sections, imported package modules, shipped data and the content of what it reads of
earlier steps; they are stamped in results/<profile>/stamps/<step>.json with a hash of each output
it declares. docs/notebooks.md ("When a step runs again") gives the rules. A run file only grows,
so its stamp holds its number of finished lines; hashes are remembered per (path, size, mtime) in
stamps/hashes.json so that gigabytes of vectors are not read at every `status`."""
from __future__ import annotations

import ast
import fnmatch
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .artifacts import STEPS, Step
from .core.errors import UserError
from .core.paths import REPO_ROOT

GRAPH_VERSION = 2           # stamps with content hashes of outputs and of what a step reads
PROVENANCE = ".provenance.json"

PACKAGE = "seakr_repro"
IGNORED_SETTINGS = ("description", "profile", "notebooks", "reproduce")   # not inputs of results
# ... and single settings of a section that is one: what a run does on a full disk
IGNORED_KEYS = {"cache": ("must_keep",)}


def _section(name: str, value: Any) -> Any:
    """A section of settings as it enters a stamp: without its IGNORED_KEYS."""
    ignored = IGNORED_KEYS.get(name, ())
    return {k: v for k, v in value.items() if k not in ignored} if isinstance(value, dict) else value


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
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


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
        if "import_module(" in text:
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
            "settings": {k: _json_sha(_section(k, settings[k])) for k in sorted(sections)},
            "modules": {p.relative_to(REPO_ROOT).as_posix(): _sha(p.read_bytes()) for p in imported_modules(sources)},
            "shipped": {f"data/{f}": _shipped_digest(f) for f in step.shipped},
            "inputs": dict(inputs)}


def digest(recorded: Mapping) -> str:
    """The stamp a step's dependants record for it."""
    return _json_sha({k: recorded[k] for k in ("code", "parameters", "settings", "modules", "shipped", "inputs")})


def _shown(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _changed(old: Mapping, new: Mapping) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def reasons(recorded: Mapping | None, now: Mapping) -> list[str]:
    """Why a step with stamp `recorded` is out of date given its inputs `now` ([]: up to date).
    A stamp from before content hashes (no `graph` version) says nothing about what the step
    read: unknown, not stale by itself (its next run records it)."""
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
            out.append(f"{what}: {_shown(changed)}")
    if recorded.get("graph") == GRAPH_VERSION:
        ups = [r for r in _changed(recorded.get("inputs", {}), now["inputs"]) if now["inputs"].get(r) is not None]
        if ups:
            out.append("what it reads changed: " + ", ".join(read_words(r) for r in ups))
    return out


def read_words(read: str) -> str:
    step, _, output = read.partition(":")
    return f"{step}'s {output}" if output else f"{step}'s outputs"


# ------------------------------------------------------------------ outputs and their content

def _hash_cache_file(res: Path) -> Path:
    return Path(res) / "stamps" / "hashes.json"


_HASHES: dict[str, list] = {}      # "path" -> [size, mtime_ns, kind, value]: this process's memory


def load_hashes(res: Path) -> None:
    """Remember the hashes recorded under `res` (a damaged record: hash again)."""
    try:
        _HASHES.update(json.loads(_hash_cache_file(res).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass


def save_hashes(res: Path) -> None:
    """Record the hashes of the files under `res` for the next process (reproduce only: `status`
    writes nothing)."""
    from .core.io import write_json

    root = str(Path(res).resolve())
    write_json(_hash_cache_file(res), {k: v for k, v in sorted(_HASHES.items()) if k.startswith(root)})


def _fact(path: Path, kind: str) -> str | int:
    """A file's content hash (`sha`) or finished lines (`lines`), remembered per size and mtime."""
    st = path.stat()
    key = str(path.resolve()) + "|" + kind
    known = _HASHES.get(key)
    if known and known[:2] == [st.st_size, st.st_mtime_ns]:
        return known[2]
    with open(path, "rb") as fh:
        if kind == "lines":
            value: str | int = sum(1 for line in fh if line.strip())
        else:
            h = hashlib.sha256()
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
            value = h.hexdigest()[:16]
    _HASHES[key] = [st.st_size, st.st_mtime_ns, value]
    return value


@dataclass(frozen=True)
class Roots:
    """Where a profile's outputs lie: results/<profile>/, tables/<profile>/, figures/<profile>/."""
    results: Path
    tables: Path
    figures: Path

    @classmethod
    def of(cls, profile: str, results: Path | None = None) -> "Roots":
        from .core.paths import FIGURES_DIR, RESULTS_ROOT, TABLES_DIR

        return cls(Path(results) if results is not None else RESULTS_ROOT / profile,
                   TABLES_DIR / profile, FIGURES_DIR / profile)


def _base(spec: str, roots: Roots) -> tuple[Path, str, str]:
    """(folder, glob, prefix of the names recorded) of one declared output."""
    head, _, rest = spec.partition("/")
    if head in ("tables", "figures") and rest:
        return getattr(roots, head), rest, head + "/"
    return roots.results, spec, ""


def output_files(outputs: tuple, roots: Roots) -> dict[str, Path]:
    """The files of declared outputs (a folder: every file in it), by the name a stamp records."""
    out = {}
    for spec in outputs:
        folder, pattern, prefix = _base(spec, roots)
        for hit in sorted(folder.glob(pattern)) if folder.is_dir() else []:
            files = sorted(p for p in hit.rglob("*") if p.is_file()) if hit.is_dir() else [hit]
            for f in files:
                if not f.name.endswith(PROVENANCE) and not f.name.startswith("."):
                    out[prefix + f.relative_to(folder).as_posix()] = f
    return out


# ------------------------------------------------------------------ one writer per output
# A file written by a step that does not declare it makes the step that does stale whenever the
# first one runs (03 once drew 90's Figure 3 files, so 90 re-ran after every 03): every declared
# output has one step that writes it, and the graph refuses a second.

def _may_overlap(a: str, b: str) -> bool:
    """Whether two declared outputs can name one file: component by component, one's name matches
    the other's pattern, down to the shorter (a folder holds what lies under it)."""
    return all(fnmatch.fnmatchcase(x, y) or fnmatch.fnmatchcase(y, x) for x, y in zip(a.split("/"), b.split("/")))


def check_one_writer(steps: Mapping[str, Step]) -> None:
    """Refuse two steps declaring outputs that can name the same file (artifacts.STEPS)."""
    declared = [(s.name, spec) for s in steps.values() for spec in (s.outputs or ())]
    for i, (first, a) in enumerate(declared):
        for second, b in declared[i + 1:]:
            if first != second and _may_overlap(a, b):
                raise UserError(f"steps {first} and {second} both declare the output {a if len(a) >= len(b) else b} "
                                f"({a} and {b}): each file has one writer, or a run of one makes the other stale",
                                setting="artifacts.STEPS outputs",
                                fix="keep the file in one of the two steps' outputs and have the other read or show it")


def output_owners(steps: Mapping[str, Step], roots: Roots) -> dict[str, tuple]:
    """Every file a step declares as its output, as it is now: {name: (step, size, mtime_ns)}."""
    out = {}
    for step in steps.values():
        for name, path in output_files(step.outputs or (), roots).items():
            with_stat = path.stat()
            out[name] = (step.name, with_stat.st_size, with_stat.st_mtime_ns)
    return out


def check_wrote_own(name: str, before: Mapping[str, tuple], after: Mapping[str, tuple]) -> None:
    """Refuse step `name` having added or changed a file another step declares as its output
    (`output_owners` before and after it ran)."""
    foreign = [(f, owner) for f, (owner, *fact) in sorted(after.items())
               if owner != name and (f not in before or list(before[f][1:]) != fact)]
    if foreign:
        file, owner = foreign[0]
        more = f" (and {len(foreign) - 1} more declared by other steps)" if len(foreign) > 1 else ""
        raise UserError(f"step {name} wrote {file}, which step {owner} declares as its output{more}: each "
                        f"file has one writer, or every run of {name} makes {owner} stale",
                        setting="artifacts.STEPS outputs",
                        fix=f"have {name} show what it draws without saving it under {owner}'s names, or move "
                            f"the file from {owner}'s outputs to {name}'s")


def outputs_now(step: Step, roots: Roots, runs: Mapping[str, Path] | None = None) -> dict:
    """What a step's declared outputs hold now: {"files": {name: sha}, "runs": {run file: lines}}.
    `runs`: its planned runs' files that exist ({name under results/<profile>/: path})."""
    files = output_files(step.outputs or (), roots)
    return {"files": {k: _fact(p, "sha") for k, p in files.items()},
            "runs": {k: _fact(p, "lines") for k, p in sorted((runs or {}).items()) if k not in files}}


def read_digest(read: str, outputs: Mapping) -> str:
    """What a dependant records of a step it reads: the content of the files it declares, or
    (read "step:output") of the files under that one output. Not its shared run files: other
    steps append to them (10 to 04's SeaKR runs), and what a step made of its runs is in its own
    files (results.csv); a run of its own deleted or cut makes the step itself stale."""
    _, _, only = read.partition(":")
    if not only:
        return _json_sha(outputs["files"])
    return _json_sha({k: v for k, v in outputs["files"].items() if k == only or k.startswith(only + "/")})


def _run_words(name: str) -> str:
    parts = name.split("/")           # runs/<dataset>/<label>-<hash>.jsonl
    return f"{parts[-1].rsplit('-', 1)[0]} on {parts[-2]}" if len(parts) >= 2 else name


def output_reasons(recorded: Mapping | None, now: Mapping) -> list[str]:
    """Why a step's outputs no longer match its stamp: a declared output missing or changed, a run
    file missing or with fewer finished questions ([] for a stamp without outputs recorded)."""
    if not recorded or recorded.get("graph") != GRAPH_VERSION:
        return []
    old = recorded.get("outputs") or {}
    out = []
    missing = [k for k in old.get("files", {}) if k not in now["files"]]
    changed = [k for k, v in old.get("files", {}).items() if k in now["files"] and now["files"][k] != v]
    for words, names in (("missing", missing), ("changed after it ran", changed)):
        if names:
            out.append(f"its output {_shown(names)} {'is' if len(names) == 1 else 'are'} {words}")
    gone: dict[str, list[str]] = {}            # folder -> its missing run files
    for name, lines in old.get("runs", {}).items():
        if name not in now["runs"]:
            gone.setdefault(name.rsplit("/", 1)[0], []).append(name)
        elif now["runs"][name] < lines:
            out.append(f"its run of {_run_words(name)} lost questions: {now['runs'][name]} of {lines}")
    for folder, names in gone.items():
        if len(names) == 1:
            out.append(f"its run of {_run_words(names[0])} is missing ({names[0]})")
        else:
            labels = [n.rsplit("/", 1)[1].rsplit("-", 1)[0] for n in names]
            out.append(f"its {len(names)} runs on {folder.rsplit('/', 1)[-1]} are missing: "
                       f"{_shown(labels, 4)} ({folder}/)")
    return out


@dataclass
class Planned:
    name: str
    action: str                          # run | up-to-date | skipped (not selected by --only)
    reasons: list[str] = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
