"""The official code's in-context examples, read at run time from the user's clone of THU-KEG/SeaKR.

`prompts.demos: official` uses the example lists the authors' code prompts with. None of that
text ships with this package: each data set class of `<official_repo>/SEAKR/dataset.py` holds a
literal `examples` list of {"question", "cot", "answer"} dicts, read with `ast` (nothing of the
clone is imported or executed).
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from ..core import paths
from ..core.errors import DataMissingError, UserError
from .examples import Demo

DATASET_FILE = "SEAKR/dataset.py"
# family -> the class of SEAKR/dataset.py holding its list
CLASSES = {"2wiki": "TwoWikiHop", "hotpotqa": "HotpotQA", "iirc": "IIRC", "simple": "SingleQA"}
HOW_TO_GET = ("clone the authors' repository (`git clone https://github.com/THU-KEG/SeaKR`) and "
              "set prompts.official_repo to the clone's directory")
_KEYS = {"question": str, "cot": list, "answer": str}


def class_attr(tree: ast.Module, cls: str, name: str) -> ast.expr | None:
    """The value assigned to `name` (`x = ...`, `x: T = ...`, `a = x = ...`) in class `cls`, or None."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign):
                    targets, value = [stmt.target], stmt.value
                elif isinstance(stmt, ast.Assign):
                    targets, value = stmt.targets, stmt.value
                else:
                    continue
                if value is not None and any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return value
    return None


def _broken(what: str, path: Path, line: int | None = None) -> UserError:
    return UserError(what, path=path, line=line, fix=f"restore the file: {HOW_TO_GET}")


def _to_demo(item, path: Path, cls: str, i: int) -> Demo:
    where = f"{cls}.examples[{i}]"
    if not isinstance(item, dict):
        raise _broken(f"{where} is not a dict", path)
    for key, typ in _KEYS.items():
        if not isinstance(item.get(key), typ):
            raise _broken(f"{where} has no {typ.__name__} '{key}'", path)
    if not all(isinstance(s, str) for s in item["cot"]):
        raise _broken(f"{where}: 'cot' must be a list of strings", path)
    return Demo(item["question"], tuple(item["cot"]), item["answer"])


@lru_cache(maxsize=16)
def _parse(path: Path, mtime_ns: int, family: str) -> tuple[Demo, ...] | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as e:
        raise _broken(f"the official dataset file cannot be parsed ({type(e).__name__}: {e})", path) from None
    cls = CLASSES[family]
    node = class_attr(tree, cls, "examples")
    if node is None:
        return None
    try:
        items = ast.literal_eval(node)
    except ValueError:
        raise _broken(f"{cls}.examples is not a literal list", path, node.lineno) from None
    if not isinstance(items, list):
        raise _broken(f"{cls}.examples is not a list", path, node.lineno)
    return tuple(_to_demo(x, path, cls, i) for i, x in enumerate(items))


def official_demos(repo: str | Path | None, family: str) -> tuple[Demo, ...]:
    """The official example list of a family ('2wiki' | 'hotpotqa' | 'iirc' | 'simple')."""
    if not repo:
        raise DataMissingError("prompts.demos is 'official' but no clone of the official repository was given",
                               setting="prompts.official_repo", fix=HOW_TO_GET)
    path = paths.setting_path(repo) / DATASET_FILE
    if not path.is_file():
        raise DataMissingError(f"the official repository's {DATASET_FILE} was not found", path=path,
                               setting="prompts.official_repo", fix=HOW_TO_GET)
    demos = _parse(path.resolve(), path.stat().st_mtime_ns, family)
    if demos is None:
        raise UserError(f"class {CLASSES[family]} with an `examples` list was not found",
                        path=path, fix=f"use an unmodified clone: {HOW_TO_GET}")
    return demos
