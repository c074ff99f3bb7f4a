"""The step graph: a notebook is stale when its code cells, parameters, the profile sections or
package modules it reads, or a step it reads changed; not when its metadata or outputs changed, and
not when an unrelated earlier step ran again. `reproduce --dry-run` says what would run and why."""
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from seakr_repro import pipeline
from seakr_repro.artifacts import STEPS, Step
from seakr_repro.core.config import load_config
from seakr_repro import step_graph as graph


def _notebook(path, body, value="x"):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell(f'PROFILE = None\nTAG = "{value}"')
    params.metadata["tags"] = ["parameters"]
    shown = new_code_cell(f"from seakr_repro.notebook import parameters\nparameters(globals(), {path.stem!r})")
    nb.cells = [new_markdown_cell("# title"), params, shown, new_code_cell(body)]
    nbformat.write(nb, path)


@pytest.fixture
def three(tmp_path, monkeypatch):
    """00 -> 02 (reads 00); 01 reads nothing and nothing reads it."""
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    monkeypatch.setitem(STEPS, "00-a", Step("00-a", settings=("seed",)))
    monkeypatch.setitem(STEPS, "01-b", Step("01-b", settings=("seakr",)))
    monkeypatch.setitem(STEPS, "02-c", Step("02-c", ("00-a",), settings=("seed",)))
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    for name in ("00-a", "01-b", "02-c"):
        _notebook(nbdir / f"{name}.ipynb", "x = 1")
    pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False)
    return nbdir


def _dry(nbdir, **kw):
    return {p.name: p for p in pipeline.plan("smoke", notebooks_dir=nbdir, **kw)}


def test_metadata_outputs_and_markdown_are_not_inputs(three):
    path = three / "00-a.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"]["display_name"] = "Python 3 (ipykernel)"    # what the Lab saves
    nb.metadata["widgets"] = {"state": {}}
    nb.cells[3].outputs = [new_output("stream", name="stdout", text="hello")]
    nb.cells[3].execution_count = 7
    nb.cells[0].source = "# another title"
    nbformat.write(nb, path)
    planned = _dry(three)
    assert {p.action for p in planned.values()} == {"up-to-date"}
    assert "nothing to do" in pipeline.dry_run_report(list(planned.values()))


def test_only_the_steps_that_read_a_changed_step_run_again(three):
    _notebook(three / "00-a.ipynb", "x = 2")          # code changed
    planned = _dry(three)
    assert planned["00-a"].reasons == ["its code cells changed"]
    assert planned["01-b"].action == "up-to-date"      # unrelated: nothing of 00 read
    assert planned["02-c"].action == "run"
    # 00 declares no outputs: its running again counts as a change of what 02 reads
    assert planned["02-c"].reasons == ["what it reads changed: 00-a's outputs"]
    # after `--only 00`, 02 is still stale (it used 00's old outputs), 01 is not
    pipeline.reproduce("smoke", only=["00"], notebooks_dir=three, progress=False, preflight=False)
    planned = _dry(three)
    assert [n for n, p in planned.items() if p.action == "run"] == ["02-c"]


def test_parameters_and_the_sections_a_step_reads(three):
    planned = _dry(three, parameters={"01-b": {"TAG": "y"}})
    assert planned["01-b"].reasons == ["parameters TAG 'x' -> 'y'"]
    assert planned["00-a"].action == "up-to-date"
    planned = _dry(three, overrides={"seakr.n_shot": 3})    # only 01 reads seakr
    assert planned["01-b"].reasons == ["profile settings it reads changed: seakr"]
    assert planned["00-a"].action == planned["02-c"].action == "up-to-date"


def test_every_notebook_is_declared_and_reads_only_earlier_steps():
    names = [p.stem for p in pipeline.notebook_steps()]
    assert set(STEPS) == set(names)
    for step in STEPS.values():
        assert step.outputs, step                      # every shipped step declares what it writes
        for read in step.reads:
            up, _, only = read.partition(":")
            assert up in names and names.index(up) < names.index(step.name), step
            assert not only or only in STEPS[up].outputs, read     # "step:output" names one of its outputs


def test_a_step_depends_on_the_package_modules_it_imports():
    def files(name):
        nb = pipeline.NOTEBOOKS_DIR / f"{name}.ipynb"
        return {p.relative_to(graph.REPO_ROOT).as_posix() for p in graph.imported_modules(graph.code_cells(nb))}
    estimators = files("03-uncertainty-estimators")
    assert "seakr_repro/uncertainty/eigenscore.py" in estimators
    assert "seakr_repro/notebook.py" in estimators and "seakr_repro/steps/render.py" in estimators
    prepare = files("00-prepare-data")
    assert "seakr_repro/methods/seakr/method.py" not in prepare and "seakr_repro/steps/prepare.py" in prepare
    # a backend chosen by name (importlib) counts all of its package's modules
    assert {"seakr_repro/retrieval/lucene.py", "seakr_repro/retrieval/bm25s_backend.py"} <= files("01-build-bm25-index")


def test_a_shipped_notebook_ignores_sections_it_does_not_read():
    cfg = load_config("default")
    nb = pipeline.NOTEBOOKS_DIR / "00-prepare-data.ipynb"
    before = graph.step_inputs(nb, cfg.data, {}, {}, STEPS["00-prepare-data"])
    after = graph.step_inputs(nb, load_config("default", {"seakr.n_shot": 2}).data, {}, {},
                              STEPS["00-prepare-data"])
    assert graph.reasons(before, after) == []
    qa = pipeline.NOTEBOOKS_DIR / "04-complex-qa.ipynb"
    before = graph.step_inputs(qa, cfg.data, {}, {}, STEPS["04-complex-qa"])
    after = graph.step_inputs(qa, load_config("default", {"seakr.n_shot": 2}).data, {}, {},
                              STEPS["04-complex-qa"])
    assert graph.reasons(before, after) == ["profile settings it reads changed: seakr"]


def test_an_old_stamp_is_said_to_be_old():
    assert "older reproduce" in graph.reasons({"stamp": "abc"}, {})[0]
    assert json.dumps(graph.reasons(None, {})) == '["it has not run yet"]'


def test_every_declared_output_has_one_writer():
    """Two steps declaring outputs that can name one file are refused, naming both and the file;
    the shipped declarations pass."""
    from seakr_repro.core.errors import UserError

    graph.check_one_writer(STEPS)
    for spec in ("figures/figure3_k.png", "calibration/delta.json", "02-extract-hidden-states-vllm"):
        with pytest.raises(UserError) as err:
            graph.check_one_writer({**STEPS, "12-x": Step("12-x", outputs=(spec,))})
        assert "12-x" in str(err.value) and spec in str(err.value) and "one writer" in str(err.value)
    graph.check_one_writer({**STEPS, "12-x": Step("12-x", outputs=("figures/figure4.*", "12-x"))})


def test_a_step_that_writes_another_steps_output_is_refused(tmp_path, monkeypatch):
    """03 once drew 90's Figure 3 files, so every run of 03 made 90 stale: `reproduce` stops after
    a step that adds or changes a file another step declares, naming both and the file (the step's
    own work stamped)."""
    from seakr_repro.core.errors import UserError

    res = (tmp_path / "results" / "smoke").resolve()
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    monkeypatch.setitem(STEPS, "00-a", Step("00-a", settings=("seed",), outputs=("a",)))
    monkeypatch.setitem(STEPS, "01-b", Step("01-b", ("00-a",), settings=("seed",), outputs=("b",)))
    monkeypatch.setitem(STEPS, "02-c", Step("02-c", settings=("seed",), outputs=("c",)))
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write = "import pathlib; p = pathlib.Path({!r}); p.parent.mkdir(parents=True, exist_ok=True); p.write_text({!r})"
    _notebook(nbdir / "00-a.ipynb", write.format(str(res / "a" / "x.txt"), "a"))
    _notebook(nbdir / "01-b.ipynb", write.format(str(res / "b" / "y.txt"), "b"))
    _notebook(nbdir / "02-c.ipynb", write.format(str(res / "b" / "y.txt"), "c"))     # 01-b's file
    with pytest.raises(UserError, match="step 02-c wrote b/y.txt, which step 01-b declares as its output"):
        pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False)
    assert (res / "stamps" / "02-c.json").is_file()
    _notebook(nbdir / "02-c.ipynb", write.format(str(res / "c" / "y.txt"), "c"))     # its own
    # 01-b runs again (its file was changed under it), 02-c with its new code; then both hold
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                                                 preflight=False)] == ["up-to-date", "ran", "ran"]
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                                                 preflight=False)] == ["up-to-date"] * 3
