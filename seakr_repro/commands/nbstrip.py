"""`python -m seakr_repro nbstrip`: a notebook as the repository keeps it, with no outputs,
execution counts or Lab metadata (reads stdin, writes stdout).

Every make target that runs Python installs it as the git clean filter of notebooks/*.ipynb
(.gitattributes; the Makefile's GIT_NOTEBOOK_FILTER), so running a notebook in the Lab leaves
nothing for git to show: only edits to its cells count. A notebook's outputs and metadata are not
inputs of its results (step_graph.py).
"""
from __future__ import annotations

import json
import sys

FILTER = "seakr-nbstrip"                       # the filter's name in .gitattributes
COMMAND = "-m seakr_repro nbstrip"             # what git runs, after the interpreter's path
KEPT_CELL_METADATA = ("tags",)                 # `parameters` marks the cell papermill and we read
LANGUAGE_INFO = {"name": "python"}


def strip(notebook: dict) -> dict:
    """The notebook without outputs, execution counts, Lab cell metadata and kernel display names."""
    out = dict(notebook)
    cells = []
    for cell in notebook.get("cells", []):
        cell = dict(cell)
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k in KEPT_CELL_METADATA}
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    out["cells"] = cells
    kernel = notebook.get("metadata", {}).get("kernelspec", {})
    out["metadata"] = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                      "name": kernel.get("name", "python3")},
                       "language_info": dict(LANGUAGE_INFO)}
    return out


def dumps(notebook: dict) -> str:
    """The repository's notebook layout (nbformat's: one-space indent, UTF-8, final newline)."""
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    text = sys.stdin.read()
    try:
        notebook = json.loads(text)
    except json.JSONDecodeError:
        sys.stdout.write(text)                 # not a notebook (a merge in progress): unchanged
        return 0
    sys.stdout.write(dumps(strip(notebook)))
    return 0
