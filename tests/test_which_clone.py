"""Two clones sharing one environment (its editable install points at the other clone) never split
one run's files between them: `reproduce` run with `python -m` from a clone's root uses that clone
for the driver (lock, stamps, executed notebooks) and for its notebooks' kernels (results), and a
command whose package comes from another clone than the one it runs in stops, naming both."""
import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from seakr_repro.core.paths import PACKAGE_ROOT

BODY = ("import seakr_repro\nfrom seakr_repro.core.paths import results_dir\n"
        "(results_dir(PROFILE) / 'who.txt').write_text(seakr_repro.__file__)")


def _clone(root):
    """A clone of the package with one more numbered notebook, tiny (the only one run: no data
    sets, no model)."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(PACKAGE_ROOT / "seakr_repro", root / "seakr_repro", ignore=ignore)
    shutil.copytree(PACKAGE_ROOT / "params", root / "params")
    shutil.copytree(PACKAGE_ROOT / "notebooks", root / "notebooks")     # the profiles name them
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell("PROFILE = None")
    params.metadata["tags"] = ["parameters"]
    shown = new_code_cell("from seakr_repro.notebook import parameters\nparameters(globals(), '99-where')")
    nb.cells = [params, shown, new_code_cell(BODY)]
    nbformat.write(nb, root / "notebooks" / "99-where.ipynb")
    return root


def _run(cwd, pythonpath, *args, flags=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEAKR_")}
    env["PYTHONPATH"] = str(pythonpath)          # the environment's install: the other clone
    return subprocess.run([sys.executable, *flags, "-m", "seakr_repro", "reproduce", "--profile", "smoke",
                           "--no-preflight", "--only", "99", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_two_clones_sharing_one_environment_never_split_a_run(tmp_path):
    a, b = _clone(tmp_path / "a"), _clone(tmp_path / "b")
    # `make reproduce` in clone a: `python -m` puts a's own package first; its kernels import the same
    done = _run(a, b)
    assert done.returncode == 0, done.stderr
    assert f"repository root: {a}" in done.stdout
    res = a / "results" / "smoke"
    assert (res / "stamps" / "99-where.json").is_file() and (res / "notebooks" / "99-where.ipynb").is_file()
    assert (res / "who.txt").read_text() == str(a / "seakr_repro" / "__init__.py")
    assert not (b / "results").exists()
    # a command importing b's package while it runs inside a: an error naming both, nothing written
    wrong = _run(a, b, "--dry-run", flags=("-P",))        # -P: the installed package, not the cwd's
    assert wrong.returncode != 0
    said = " ".join((wrong.stdout + wrong.stderr).split())
    assert f"runs in the clone {a}" in said and f"imports seakr_repro from {b}" in said
    assert not (b / "results").exists()
    # from b's own root the same environment is b's, whole
    assert _run(b, b, "--dry-run").returncode == 0
    assert json.loads((res / "stamps" / "99-where.json").read_text())["graph"] == 2


def test_which_clone_a_path_lies_in_and_the_check_naming_both(tmp_path, monkeypatch):
    from seakr_repro.core.errors import UserError
    from seakr_repro.core.paths import REPO_ROOT
    from seakr_repro.core.which_clone import checked_repo_root, checkout_of

    other = tmp_path / "other"
    (other / "seakr_repro").mkdir(parents=True)
    (other / "seakr_repro" / "__init__.py").write_text("")
    (other / "notebooks" / "deep").mkdir(parents=True)
    assert checkout_of(other / "notebooks" / "deep") == other.resolve()
    assert checkout_of(tmp_path) is None                      # no clone around it
    monkeypatch.delenv("SEAKR_REPO_ROOT", raising=False)
    assert checked_repo_root(REPO_ROOT) == REPO_ROOT          # this clone's own root
    assert checked_repo_root(tmp_path) == REPO_ROOT           # outside any clone: as chosen
    with pytest.raises(UserError, match=f"runs in the clone {other.resolve()}"):
        checked_repo_root(other / "notebooks")
    monkeypatch.setenv("SEAKR_REPO_ROOT", str(REPO_ROOT))     # the root chosen on purpose
    assert checked_repo_root(other) == REPO_ROOT
