"""What a reader sees in the Lab: the parameters cell shows its table only, no cell ends in a path
(an absolute PosixPath echoed), a profile's result folders are git-ignored unless committed, and a
figure with nothing to draw says why in words."""
import ast
import json
import subprocess

import matplotlib
import numpy as np
import pandas as pd
import pytest

from seakr_repro.core.paths import NOTEBOOKS_DIR, REPO_ROOT
from seakr_repro.notebook import parameters
from seakr_repro.reporting import figures

matplotlib.use("Agg")


def test_the_parameters_cell_shows_only_its_table(capsys):
    namespace = {"PROFILE": None, "N_QUESTIONS": None}
    assert parameters(namespace, "04-complex-qa") is None       # nothing for the cell to echo below
    out = capsys.readouterr().out
    assert "Markdown object" in out and "Parameter(name=" not in out and namespace["PROFILE"]


def _path_functions() -> set[str]:
    """Functions of the package that return a path (annotated `-> Path`)."""
    names = set()
    for path in (REPO_ROOT / "seakr_repro").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.returns is not None \
                    and ast.unparse(node.returns) in ("Path", "Path | None", "pathlib.Path"):
                names.add(node.name)
    return names


def test_no_notebook_cell_ends_in_a_path():
    returns_path = _path_functions()
    assert {"save_dataframe", "save_json", "results_dir"} <= returns_path
    for nb in sorted(NOTEBOOKS_DIR.glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] != "code":
                continue
            body = ast.parse("".join(cell["source"])).body
            last = body[-1] if body else None
            if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
                func = last.value.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                assert name not in returns_path, f"{nb.name} cell {i} ends in {name}(...), a path it echoes"


@pytest.mark.parametrize("folder", ["figures", "tables"])
def test_result_folders_of_other_profiles_are_ignored(folder):
    def ignored(rel):
        return subprocess.run(["git", "check-ignore", "-q", rel], cwd=REPO_ROOT).returncode == 0

    assert ignored(f"{folder}/smoke/x.png") and ignored(f"{folder}/paper-tiny/x.md")
    assert not ignored(f"{folder}/default/x.png")
    tracked = subprocess.run(["git", "ls-files", folder], cwd=REPO_ROOT, capture_output=True, text=True).stdout.split()
    profiles = {p.split("/")[1] for p in tracked if p.count("/") >= 2}
    assert profiles == {"default"}          # the only profile with committed artifacts


def _texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_a_figure_with_nothing_to_draw_says_why():
    every_wrong = pd.DataFrame({"k": [2, 4], "auroc": [np.nan, np.nan], "lo": np.nan, "hi": np.nan,
                                "n": [5, 5], "n_incorrect": [5, 5]})
    fig = figures.plot_quality_vs_k(every_wrong)
    assert "AUROC is undefined: all 5 answers were wrong" in _texts(fig)
    assert list(fig.axes[0].get_xticks()) == [] and list(fig.axes[0].get_yticks()) == []
    layers = every_wrong.rename(columns={"k": "layer"}).assign(n_incorrect=0)
    assert "all 5 answers were right" in _texts(figures.plot_quality_vs_layer(layers, chosen_layer=1))
    fig = figures.plot_delta_tradeoff(pd.DataFrame(columns=["delta", "retrieval_rate", "acc_kept"]))
    assert "Nothing to draw" in _texts(fig)
    drawn = figures.plot_quality_vs_k(every_wrong.assign(auroc=[0.6, 0.7]))
    assert "undefined" not in _texts(drawn) and len(drawn.axes[0].get_xticks()) > 0
