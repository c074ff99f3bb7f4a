"""The paper's artifacts are declared once (seakr_repro/artifacts.py): the table steps run exactly
the declared rows, the notebooks name a table by its key, and Figure 3 carries its markers
wherever it is drawn (notebook 03 shows and step 90 saves `render.figure`)."""
import ast
import json
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from seakr_repro.runs import inputs
from seakr_repro import artifacts
from seakr_repro.runs import grid
from seakr_repro.steps import tables, render
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.core.paths import NOTEBOOKS_DIR

sys.path.insert(0, str(Path(__file__).parent))


def test_declarations_are_complete():
    assert list(artifacts.TABLES) == ["table1", "table2", "table3", "table4", "table7"]
    assert artifacts.methods("table1") == ("cot", "ircot", "self_rag", "flare", "dragin", "seakr")
    assert "ircot" not in artifacts.methods("table2")
    assert artifacts.methods("table3") == tuple(artifacts.ABLATIONS)
    from seakr_repro.reporting import load_paper_table
    for t in artifacts.TABLES.values():
        assert set(load_paper_table(t.paper)["metric"]) >= set(t.metrics)     # the paper's CSV
        assert t.caption.startswith(f"Table {t.key.removeprefix('table')}:")
    # Self-RAG runs its own checkpoint, declared once
    selfrag = [r for r in artifacts.TABLES["table1"].runs if r.label == "self_rag"]
    assert selfrag[0].model == artifacts.SELF_RAG_MODEL
    assert all(r.model is None for r in artifacts.TABLES["table1"].runs if r.label != "self_rag")
    assert render.TABLES == tuple(artifacts.TABLES.values())
    with pytest.raises(UserError, match="table9"):
        artifacts.table("table9")


@pytest.mark.parametrize("key", ["table1", "table2", "table3"])
def test_run_table_runs_exactly_the_declared_rows(key, monkeypatch, tmp_path):
    """At smoke size, with a fake model: every declared row has numbers or a reason, nothing else,
    SeaKR first; results.csv and skipped.json are saved in the table's step folder."""
    from fakes import FakeBackend, FakeSearcher

    import seakr_repro.core.paths as paths
    import seakr_repro.runs.runner as runner
    from seakr_repro.data.records import QuestionRecord

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)
    record = QuestionRecord(id="q1", question="Who?", answers=["Ann"])
    monkeypatch.setattr(inputs, "load_prepared", lambda cfg, dataset: [record])
    from seakr_repro.uncertainty.registry import ESTIMATORS
    for step in (grid, tables):
        monkeypatch.setattr(step, "deltas_for", lambda cfg: {n: -6.0 for n in ESTIMATORS})
    monkeypatch.setattr(runner, "run_path", lambda p, d, label, c: tmp_path / p / d / f"{label}.jsonl")
    ran = []

    def run_method(method, records, path, **kw):
        ran.append(path.stem)
        return [{"id": "q1", "answer": "Ann", "golds": ["Ann"], "em": 1, "f1": 1, "n_retrievals": 0,
                 "llm_calls": 1, "tokens": 1, "seconds": 0.0}]
    monkeypatch.setattr(runner, "run_method", run_method)
    cfg = load_config("smoke")
    pool = grid.BackendPool(
        cfg, loader=lambda cfg, name: FakeBackend(lambda p, s: "So the answer is Ann.", name=name))
    run = tables.run_table(key, cfg, 1, pool=pool, searcher=FakeSearcher([]), progress=False)
    produced = set(run.results["method"]) | set(run.skipped)
    assert produced == set(artifacts.methods(key))
    assert not set(run.results["method"]) & set(run.skipped)
    assert ran[0] == "seakr" and set(ran) == set(run.results["method"])
    out = tmp_path / "smoke" / artifacts.TABLES[key].step
    assert (out / "results.csv").is_file() and json.loads((out / "skipped.json").read_text()) == run.skipped
    assert set(run.results["table"]) == {key}
    md = render.beside_paper(key, cfg)          # from what the step saved
    assert md.startswith(f"**Table {key[-1]}:") or f"Table {key[-1]}:" in md


def test_run_table_rejects_what_is_not_declared():
    cfg = load_config("smoke")
    with pytest.raises(UserError, match="no row"):
        tables.run_table("table7", cfg, 1, methods=["seakr", "self_rg"], searcher=object())
    with pytest.raises(UserError, match="n_shot"):
        tables.run_table("table4", cfg, 1, pool=object(), searcher=object(), cal_fanout=1)
    with pytest.raises(UserError, match="no step arguments"):
        tables.run_table("table1", cfg, 1, pool=object(), searcher=object(), n_shot=2)


@pytest.mark.parametrize("name,key", [("04-complex-qa", "table1"), ("05-simple-qa", "table2"),
                                      ("06-ablations", "table3"), ("07-backbones", "table4"),
                                      ("09-efficiency", "table7")])
def test_compute_notebooks_name_their_table_once(name, key):
    cells = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", 4).cells
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert code.count("tables.run_table(") == 1 and f'run_table("{key}"' in code
    assert code.count("render.beside_paper(") == 1 and f'beside_paper("{key}"' in code
    assert "TABLES[" not in code and "selfrag" not in code and "run_grid" not in code
    assert all(not c.get("outputs") for c in cells if c.cell_type == "code")


def _vertical_lines(fig) -> list[float]:
    """x of every vertical line (axvline) in the figure."""
    xs = []
    for ax in fig.axes:
        for line in ax.get_lines():
            x = np.asarray(line.get_xdata(), dtype=float)
            if len(x) == 2 and x[0] == x[1] and list(line.get_ydata()) == [0, 1]:
                xs.append(float(x[0]))
    return xs


@pytest.fixture
def step03(tmp_path, monkeypatch):
    """What notebook 03 saves: the three CSVs and calibration/delta.json."""
    import seakr_repro.core.paths as paths
    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)

    def write(profile, n_layers=30, delta=-3.25):
        res = tmp_path / profile / "03-uncertainty-estimators"
        res.mkdir(parents=True)
        pd.DataFrame({"k": [2, 4], "auroc": [0.5, 0.6], "lo": [0.4, 0.5], "hi": [0.6, 0.7]}) \
            .to_csv(res / "quality_vs_k.csv", index=False)
        pd.DataFrame({"layer": range(n_layers), "auroc": 0.6, "lo": 0.5, "hi": 0.7}) \
            .to_csv(res / "quality_vs_layer.csv", index=False)
        pd.DataFrame({"delta": [-8.0, -6.0, -3.0, 0.0], "retrieval_rate": [1, 0.8, 0.5, 0.1],
                      "acc_kept": [0.0, 0.3, 0.5, 0.6]}).to_csv(res / "delta_sweep.csv", index=False)
        (tmp_path / profile / "calibration").mkdir()
        (tmp_path / profile / "calibration" / "delta.json").write_text(json.dumps(
            {"model": "m", "deltas": {"eigen": delta, "energy": 1.0}, "diagnostics": {}}))
    return write


def test_figure3_carries_its_markers(step03):
    step03("smoke", n_layers=30)                   # SmolLM2-135M: 30 layers, middle = 14
    smoke = load_config("smoke")
    assert _vertical_lines(render.figure("figure3_layer", smoke)) == [14.0]
    assert _vertical_lines(render.figure("figure3_delta", smoke)) == [-3.25]   # not LLaMA-2: no -6
    pinned = smoke.with_overrides({"uncertainty.layer": 3})
    assert _vertical_lines(render.figure("figure3_layer", pinned)) == [3.0]
    step03("paper", n_layers=32, delta=-4.5)       # LLaMA-2-7B-chat: layer 15, and the paper's -6
    paper = load_config("paper")
    assert _vertical_lines(render.figure("figure3_layer", paper)) == [15.0]
    assert sorted(_vertical_lines(render.figure("figure3_delta", paper))) == [-6.0, -4.5]
    assert _vertical_lines(render.figure("figure3_k", paper)) == []


def test_render_figures_draws_figure3_with_the_same_function(step03, tmp_path, monkeypatch):
    step03("smoke")
    monkeypatch.setattr(render, "FIGURES_DIR", tmp_path / "figures")
    drawn = []
    real = render.figure
    monkeypatch.setattr(render, "figure", lambda panel, cfg: drawn.append(panel) or real(panel, cfg))
    written = render.render_figures(load_config("smoke"))
    assert drawn == ["figure3_k", "figure3_layer", "figure3_delta"]
    assert {p.name for p in written} >= {"figure3_layer.png", "figure3_delta.pdf"}
    cells = nbformat.read(NOTEBOOKS_DIR / "03-uncertainty-estimators.ipynb", 4).cells
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    for panel in artifacts.FIGURES:       # shown, not saved: the files are 90's (one writer each)
        assert f'show_figure(render.figure("{panel}", cfg))' in code
    assert not any(w in code for w in ("draw_figure", "save_figure", "render_figures", "savefig"))
    assert "plot_delta_tradeoff" not in code and "-6.0" not in code


def _code_strings(tree):
    """The string constants of a module's code (f-string parts included), docstrings left out."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


# steps/claims.py names its inputs' folders in measure_claims, which is being rewritten per claim
def test_only_the_step_declaration_spells_a_step_folder():
    """A step's folder name is written in artifacts.py alone; every other module reads it from
    STEPS, a table's `step` or the names artifacts exports (a message may still name a notebook in
    its prose: the strings checked are those that begin with a folder name, a path or the folder)."""
    root = Path(artifacts.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "artifacts.py":
            continue
        for text in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            found += [(rel, text) for step in artifacts.STEPS if text.startswith(step)]
    assert not found


def test_every_method_that_joins_a_table_has_its_disk_figures():
    """runs.disk_needs sizes a run from its method's declared figures: none is borrowed."""
    from seakr_repro.methods import method_class

    for spec in artifacts.METHODS.values():
        assert method_class(spec.name).__name__ == spec.cls.rpartition(":")[2]
        if set(spec.tables) & set(artifacts.TABLES):
            assert spec.cache_bytes and spec.run_bytes, spec.name
    assert artifacts.seed_methods() == tuple(m for m, s in artifacts.METHODS.items() if "seed" in s.tables)
