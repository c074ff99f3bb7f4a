"""Interactive runs stay out of git: the clean filter that make installs (`python -m seakr_repro
nbstrip`) strips outputs, execution counts and Lab metadata from notebooks/*.ipynb, and leaves the
committed notebooks as they are."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seakr_repro.pipeline import notebook_steps
from seakr_repro.commands import nbstrip

REPO = Path(__file__).resolve().parents[1]


def _ran_in_the_lab(text: str) -> str:
    nb = json.loads(text)
    nb["metadata"]["kernelspec"]["display_name"] = "Python 3 (seakr-repro)"
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = i + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["hello\n"]}]
        cell["metadata"]["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00"}
    return nbstrip.dumps(nb)


def test_committed_notebooks_pass_unchanged():
    for path in notebook_steps():
        text = path.read_text(encoding="utf-8")
        assert nbstrip.dumps(nbstrip.strip(json.loads(text))) == text, path.name


def test_a_lab_run_strips_back_to_the_committed_notebook():
    path = notebook_steps()[3]
    text = path.read_text(encoding="utf-8")
    assert nbstrip.dumps(nbstrip.strip(json.loads(_ran_in_the_lab(text)))) == text
    tagged = [c for c in json.loads(text)["cells"] if c["metadata"].get("tags") == ["parameters"]]
    assert tagged                                   # the parameters tag survives


def test_git_sees_no_change_after_a_lab_run(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(REPO / ".gitattributes", repo / ".gitattributes")
    nb = repo / "notebooks" / "03.ipynb"
    shutil.copy(notebook_steps()[3], nb)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GIT_CONFIG_GLOBAL": os.devnull}

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                              env=env, capture_output=True, text=True, check=True).stdout
    git("init", "-q")
    # what make configures (Makefile, GIT_NOTEBOOK_FILTER), with this interpreter
    git("config", f"filter.{nbstrip.FILTER}.clean", f"{sys.executable} {nbstrip.COMMAND}")
    git("add", ".")
    git("commit", "-qm", "x")
    nb.write_text(_ran_in_the_lab(nb.read_text(encoding="utf-8")), encoding="utf-8")
    assert git("diff") == ""                    # nothing to show...
    git("add", "-A")
    assert git("status", "--porcelain") == ""   # ...and nothing to commit (git status may list the
    #                                             notebook as touched until `git add` re-reads it)
    # an edit to a cell is still a change
    nb.write_text(nb.read_text(encoding="utf-8").replace("N_BOOT = 1000", "N_BOOT = 200"), encoding="utf-8")
    assert "N_BOOT = 200" in git("diff")


def test_setup_installs_the_filter_git_attributes_name():
    assert f"notebooks/*.ipynb filter={nbstrip.FILTER}" in (REPO / ".gitattributes").read_text()
    make = (REPO / "Makefile").read_text()
    assert f"git config filter.{nbstrip.FILTER}.clean '$(PY) {nbstrip.COMMAND}'" in make


def test_the_filter_command_strips_stdin():
    """What git runs: the subcommand reads a notebook on stdin and writes it stripped."""
    text = notebook_steps()[3].read_text(encoding="utf-8")
    out = subprocess.run([sys.executable, *nbstrip.COMMAND.split()], input=_ran_in_the_lab(text),
                         capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout == text


@pytest.mark.parametrize("target", ["figures", "test", "bench", "setup"])
def test_make_sets_the_filter_again_in_a_clone_configured_before(tmp_path, target):
    """A clone whose git config still names an older filter command (`seakr_repro.tools.nbstrip`,
    a module that no longer exists) gets the current one back from any target that runs Python,
    without rebuilding the virtual environment."""
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("no git or make")
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", clone / "Makefile")
    for name in ("requirements.txt", "requirements-nodeps.txt", "pyproject.toml", "scripts/setup_env.sh"):
        (clone / name).write_text("")
    venv = clone / "venv"
    venv.mkdir()
    stamp = venv / ".setup-stamp"
    stamp.write_text("")
    made = stamp.stat().st_mtime + 10
    os.utime(stamp, (made, made))                             # newer than what it is made from
    fake_python = tmp_path / "python"                         # the recipes' Python: does nothing
    fake_python.write_text("#!/bin/sh\nexit 0\n")
    fake_python.chmod(0o755)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "init", "-q"], cwd=clone, env=env, check=True)
    key = f"filter.{nbstrip.FILTER}.clean"
    subprocess.run(["git", "config", key, f"{sys.executable} -m seakr_repro.tools.nbstrip"], cwd=clone,
                   env=env, check=True)
    subprocess.run(["make", "-s", target, f"VENV={venv}", f"PY={fake_python}"], cwd=clone, env=env,
                   check=True, capture_output=True, timeout=60)
    got = subprocess.run(["git", "config", key], cwd=clone, env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert got == f"{fake_python} {nbstrip.COMMAND}"
    assert stamp.stat().st_mtime == made                      # nothing was set up again
