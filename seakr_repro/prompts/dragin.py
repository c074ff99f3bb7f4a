"""DRAGIN's own prompt, read at run time from the user's clone of oneal2000/DRAGIN.

The paper's FLARE and DRAGIN numbers (and CoT's, IR-CoT's) come from runs of DRAGIN's code, whose
prompt is built by `src/data.py`: each data set class holds a literal `examplars` list of
{"question", "cot", "answer"} dicts (a "cot" may be a tuple of strings, joined with ""), and three
one-line lambdas returning f-strings: `demo_input_template(ques)`, `test_input_template(ques)`
and `output_template(cot, ans)`. A demo reads `demo_input + (" " unless it ends in a space or
newline) + output`, and the prompt is the first `fewshot` demos each followed by "\\n", then the
question through `test_input_template` (HotpotQA's adds an instruction line above the question).

None of that text ships with this package, and nothing of the clone is imported or executed: the
file is parsed with `ast`. The simple-QA sets (which DRAGIN never ran) take HotpotQA's class.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..core import paths
from ..core.errors import DataMissingError, UserError
from .official import class_attr

DATA_FILE = "src/data.py"
CLASSES = {"2wiki": "WikiMultiHopQA", "hotpotqa": "HotpotQA", "iirc": "IIRC", "simple": "HotpotQA"}
HOW_TO_GET = ("clone DRAGIN's repository (`git clone https://github.com/oneal2000/DRAGIN "
              "data/raw/DRAGIN`) or set prompts.dragin_repo to a clone's directory")
TEMPLATES = ("demo_input_template", "test_input_template", "output_template")


@dataclass(frozen=True)
class DraginPrompt:
    """The demos (each rendered as DRAGIN's `case`) and the test template of one data set."""

    demos: tuple[str, ...]
    test_template: tuple[str, str]         # the question goes between the two parts

    def block(self, n_shot: int) -> str:
        """The first `n_shot` demos, each followed by a newline (DRAGIN's prompt head)."""
        if n_shot > len(self.demos):
            raise UserError(f"{n_shot} demos were asked for but DRAGIN's list holds {len(self.demos)}",
                            setting="baselines.n_shot", fix=f"use at most {len(self.demos)}")
        return "".join(d + "\n" for d in self.demos[:n_shot])

    def case(self, question: str) -> str:
        return self.test_template[0] + question + self.test_template[1]


def _fail(what: str, path: Path, node: ast.AST | None = None) -> UserError:
    return UserError(what, path=path, line=getattr(node, "lineno", None),
                     fix=f"use an unmodified clone: {HOW_TO_GET}")


def _template(node: ast.expr | None, cls: str, name: str, path: Path):
    """(parameter names, parts) of `lambda self, a, ...: f'...'`; a part is a str or the index of
    the parameter it interpolates."""
    where = f"{cls}.{name}"
    if not isinstance(node, ast.Lambda) or not isinstance(node.body, (ast.JoinedStr, ast.Constant)):
        raise _fail(f"{where} is not a lambda returning an f-string", path, node)
    params = [a.arg for a in node.args.args][1:]          # without `self`
    body = node.body
    values = [body] if isinstance(body, ast.Constant) else body.values
    parts: list[str | int] = []
    for v in values:
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            parts.append(v.value)
        elif (isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)
              and v.value.id in params and v.conversion == -1 and v.format_spec is None):
            parts.append(params.index(v.value.id))
        else:
            raise _fail(f"{where} holds more than text and its parameters", path, v)
    return parts


def _render(parts, *args: str) -> str:
    return "".join(p if isinstance(p, str) else args[p] for p in parts)


def _demo(item, path: Path, cls: str, i: int, demo_in, output) -> str:
    where = f"{cls}.examplars[{i}]"
    if not isinstance(item, dict):
        raise _fail(f"{where} is not a dict", path)
    q, cot, a = item.get("question"), item.get("cot"), item.get("answer")
    if isinstance(cot, (list, tuple)) and all(isinstance(s, str) for s in cot):
        cot = "".join(cot)
    if not (isinstance(q, str) and isinstance(cot, str) and isinstance(a, str)):
        raise _fail(f"{where} needs a str 'question', a str (or strings) 'cot' and a str 'answer'", path)
    head = _render(demo_in, q)
    return head + ("" if head[-1:] in ("\n", " ") else " ") + _render(output, cot, a)


@lru_cache(maxsize=16)
def _parse(path: Path, mtime_ns: int, family: str) -> DraginPrompt:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as e:
        raise _fail(f"DRAGIN's data file cannot be parsed ({type(e).__name__}: {e})", path) from None
    cls = CLASSES[family]
    node = class_attr(tree, cls, "examplars")
    if node is None:
        raise _fail(f"class {cls} with an `examplars` list was not found", path)
    try:
        items = ast.literal_eval(node)
    except ValueError:
        raise _fail(f"{cls}.examplars is not a literal list", path, node) from None
    if not isinstance(items, list):
        raise _fail(f"{cls}.examplars is not a list", path, node)
    demo_in, test_in, output = (_template(class_attr(tree, cls, t), cls, t, path) for t in TEMPLATES)
    test = _render(test_in, "\0").split("\0")
    if len(test) != 2:
        raise _fail(f"{cls}.test_input_template must hold the question once", path)
    return DraginPrompt(tuple(_demo(x, path, cls, i, demo_in, output) for i, x in enumerate(items)), (test[0], test[1]))


def dragin_prompt(repo: str | Path | None, family: str) -> DraginPrompt:
    """DRAGIN's demos and test template for a family ('2wiki' | 'hotpotqa' | 'iirc' | 'simple')."""
    if not repo:
        raise DataMissingError("the faithful baselines read DRAGIN's demos, but no clone of DRAGIN's "
                               "repository was given", setting="prompts.dragin_repo", fix=HOW_TO_GET)
    path = paths.setting_path(repo) / DATA_FILE      # data/raw/... follows SEAKR_RAW_DIR
    if not path.is_file():
        raise DataMissingError(f"DRAGIN's {DATA_FILE} was not found", path=path,
                               setting="prompts.dragin_repo", fix=HOW_TO_GET)
    return _parse(path.resolve(), path.stat().st_mtime_ns, family)
