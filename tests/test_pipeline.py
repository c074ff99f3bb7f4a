"""`make reproduce`'s engine: notebooks run in order, a step re-runs only when an input changed,
and a failing notebook leaves no fresh-looking output."""
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from seakr_repro import pipeline
from seakr_repro.errors import UserError


def _notebook(path, body):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell('PROFILE = "default"\nTAG = "x"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, new_code_cell(body)]
    nbformat.write(nb, path)


@pytest.fixture
def steps(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    log = tmp_path / "log.txt"
    for name in ("00-first", "01-second"):
        _notebook(nbdir / f"{name}.ipynb",
                  f"open({str(log)!r}, 'a').write('{name} ' + PROFILE + ' ' + TAG + '\\n')")
    return nbdir, log


def test_incremental_runs(steps, tmp_path):
    nbdir, log = steps
    first = pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert [r.status for r in first] == ["ran", "ran"]
    assert log.read_text().split("\n")[:2] == ["00-first smoke x", "01-second smoke x"]
    again = pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert [r.status for r in again] == ["up-to-date", "up-to-date"]
    # changing the second notebook re-runs it only; changing the first re-runs both
    _notebook(nbdir / "01-second.ipynb", f"open({str(log)!r}, 'a').write('changed\\n')")
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)] == \
        ["up-to-date", "ran"]
    _notebook(nbdir / "00-first.ipynb", "pass")
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)] == \
        ["ran", "ran"]
    # parameters are inputs too
    res = pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                             parameters={"01-second": {"TAG": "y"}})
    assert [r.status for r in res] == ["up-to-date", "ran"]


def test_failed_notebook_leaves_no_fresh_output(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    _notebook(nbdir / "00-broken.ipynb", "raise ValueError('boom')")
    with pytest.raises(UserError) as err:
        pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert "ValueError: boom" in str(err.value)
    out = tmp_path / "results" / "smoke" / "notebooks"
    assert not (out / "00-broken.ipynb").exists()
    assert (out / "00-broken.failed.ipynb").exists()
    assert not (tmp_path / "results" / "smoke" / "stamps" / "00-broken.json").exists()


def test_unknown_step_is_explained(steps):
    nbdir, _ = steps
    with pytest.raises(UserError, match="unknown step"):
        pipeline.reproduce("smoke", only=["07"], notebooks_dir=nbdir, progress=False)


def test_set_overrides_reach_the_notebooks_and_the_stamps(tmp_path, monkeypatch):
    """`reproduce --set key=value`: the notebooks' load_config sees it, and a changed override
    re-runs the steps (it is part of the config hash in the stamps)."""
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    monkeypatch.delenv("SEAKR_OVERRIDES", raising=False)
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    out = tmp_path / "seen.txt"
    _notebook(nbdir / "00-only.ipynb",
              "from seakr_repro.config import load_config\n"
              f"open({str(out)!r}, 'a').write(load_config(PROFILE)['model.backend'] + '\\n')")
    run = lambda **kw: pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, **kw)  # noqa: E731
    run(overrides={"model.backend": "vllm"})
    run(overrides={"model.backend": "vllm"})              # unchanged: up to date
    run()                                                  # override dropped: runs again
    assert out.read_text().split() == ["vllm", "hf"]
    import os
    assert "SEAKR_OVERRIDES" not in os.environ            # nothing leaks into this process


def test_bad_overrides_environment_is_explained(monkeypatch):
    from seakr_repro.config import load_config
    monkeypatch.setenv("SEAKR_OVERRIDES", "{not json")
    with pytest.raises(UserError, match="SEAKR_OVERRIDES"):
        load_config("smoke")
