"""What you see is what runs: every notebook parameter's value and where it came from (command
line, a value typed into the parameters cell, the profile, the notebook), shown as the executed
copy's first output; a typed value is never silently replaced."""
import json

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from seakr_repro import notebook as nbp
from seakr_repro import pipeline


def test_the_rule_command_line_then_typed_then_profile_then_notebook():
    cell = {"A": 1, "B": 20, "C": 3, "D": 4}          # B was 2 when committed: typed
    committed = {"A": 1, "B": 2, "C": 3, "D": 4}
    got = nbp.resolve(cell, committed, profile_values={"B": 5, "C": 6}, command_line={"D": 7},
                      where_profile=lambda n: "params/smoke.yaml")
    by = {p.name: p for p in got}
    assert (by["A"].value, by["A"].source) == (1, nbp.NOTEBOOK)
    assert (by["B"].value, by["B"].source) == (20, nbp.TYPED)         # typed beats the profile...
    assert "20 typed in the parameters cell is used, not 5 from params/smoke.yaml" in by["B"].note
    assert (by["C"].value, by["C"].source, by["C"].where) == (6, nbp.PROFILE_SOURCE, "params/smoke.yaml")
    assert (by["D"].value, by["D"].source) == (7, nbp.COMMAND_LINE)
    assert [p.name for p in got if p.note] == ["B"]                    # said once, where it matters


def test_a_typed_value_the_command_line_replaces_is_said():
    got = nbp.resolve({"N": 9}, {"N": 1}, {}, {"N": 3})
    assert got[0].value == 3 and "N = 9 typed in the parameters cell is not used" in got[0].note


def test_without_a_committed_notebook_every_value_is_the_notebooks():
    got = nbp.resolve({"N": 9}, None, {"N": 3}, {})
    assert (got[0].value, got[0].source) == (3, nbp.PROFILE_SOURCE)


def test_profile_values_are_traced_to_their_file():
    # smoke extends default; both set 02's N_FANOUT, only default sets 07's N_CAL_FANOUT... via smoke
    assert nbp.profile_source_file("smoke", "02-extract-hidden-states", "N_FANOUT") == "params/smoke.yaml"
    assert nbp.profile_source_file("default", "02-extract-hidden-states", "N_FANOUT") == "params/default.yaml"
    assert nbp.profile_source_file("smoke", "02-extract-hidden-states", "NOPE") == "--set"


def test_shipped_notebooks_show_the_profile_values_they_run():
    got = {p.name: p for p in nbp.effective_parameters("02-extract-hidden-states", profile="default")}
    assert got["PROFILE"].value == "default" and got["PROFILE"].source == nbp.COMMAND_LINE
    assert (got["N_FANOUT"].value, got["N_FANOUT"].where) == (30, "params/default.yaml")
    assert got["N_SHOT"].source == nbp.NOTEBOOK


def test_every_notebook_shows_its_parameters_first():
    from seakr_repro.pipeline import notebook_steps
    for path in notebook_steps():
        cells = json.loads(path.read_text())["cells"]
        i = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
        assert f'parameters(globals(), "{path.stem}")' in "".join(cells[i + 1]["source"]), path.name
        assert "".join(cells[i]["source"]).startswith("PROFILE = None"), path.name


def _notebook(path, params_src, body):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell(params_src)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, new_code_cell(f"from seakr_repro.notebook import parameters\n"
                                      f"parameters(globals(), {path.stem!r})"), new_code_cell(body)]
    nbformat.write(nb, path)


def test_the_executed_copy_opens_with_the_parameters_that_ran(tmp_path, monkeypatch):
    """The table is the first output, and it matches what the notebook's code saw."""
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    nb = tmp_path / "00-x.ipynb"
    seen = tmp_path / "seen.json"
    _notebook(nb, 'PROFILE = None\nN = 1\nM = "a"',
              f"import json\nopen({str(seen)!r}, 'w').write(json.dumps([PROFILE, N, M]))")
    out = pipeline.run_notebook(nb, "smoke", {"N": 5}, out_dir=tmp_path / "out", progress=False)
    assert json.loads(seen.read_text()) == ["smoke", 5, "a"]
    executed = json.loads(out.read_text())
    first = next(o for c in executed["cells"] if c["cell_type"] == "code" for o in c["outputs"])
    table = "".join(first["data"]["text/markdown"])
    assert "| `PROFILE` | `'smoke'` | command line (reproduce --profile) |" in table
    assert "| `N` | `5` | command line (--param) |" in table
    assert "| `M` | `'a'` | notebook |" in table


def test_param_on_the_command_line_names_a_notebook_and_one_of_its_parameters():
    from seakr_repro.core.errors import UserError
    assert pipeline.parse_param("03:N_BOOT=200") == ("03-uncertainty-estimators", "N_BOOT", 200)
    assert pipeline.parse_param("09-efficiency:METHODS=[cot, seakr]")[2] == ["cot", "seakr"]
    for bad, said in (("03:N_BOT=2", "has no parameter 'N_BOT'"), ("77:N=1", "no notebook '77'"),
                      ("N_BOOT=2", "is not NOTEBOOK:NAME=VALUE"), ("03:PROFILE=smoke", "no parameter")):
        try:
            pipeline.parse_param(bad)
        except UserError as err:
            assert said in str(err)
        else:
            raise AssertionError(bad)
