"""Staleness by content, on the shipped step graph and the smoke profile, over a fabricated
results tree (each step's "run" writes its declared outputs; no notebook executes): a step re-runs
when what it reads changed, not because a step it reads ran; a deleted run file makes its step
stale and shows as 0/N in `status`; a stamp from before content hashes costs no re-run."""
import json

import pytest

from seakr_repro import pipeline
from seakr_repro import step_graph as graph
from seakr_repro.core import paths
from seakr_repro.core.config import load_config
from seakr_repro.runs import plan as run_plan
from seakr_repro.commands import status

N03 = "03-uncertainty-estimators"


class FakeSteps:
    """Stands in for the notebooks: each step writes its declared outputs. Step 03's AUROC table
    follows N_BOOT; its delta.json only `delta` (what the intervals do not change)."""

    def __init__(self, res):
        self.res, self.ran, self.delta = res, [], -6.0
        self.cfg = load_config("smoke")

    def _write(self, rel, text):
        path = self.res / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def __call__(self, nb, planned):
        name = nb.stem
        self.ran.append(name)
        self._write(f"notebooks/{nb.name}", "{}")            # the executed copy
        params = planned.inputs["parameters"]
        if name == N03:
            self._write(f"{N03}/estimator_auroc.csv", f"estimator,auroc\neigen,0.{params['N_BOOT']}\n")
            self._write(f"{N03}/estimator_auroc.csv.provenance.json", json.dumps({"time": len(self.ran)}))
            self._write("calibration/delta.json", json.dumps({"eigen": self.delta}))
        elif name == "90-render":
            for rel in ("table1_complex_qa.md", "claims.md"):
                (paths.TABLES_DIR / "smoke").mkdir(parents=True, exist_ok=True)
                (paths.TABLES_DIR / "smoke" / rel).write_text("table\n")
        else:
            folder = graph.declaration(name, []).outputs[0].rstrip("*")
            self._write(f"{folder}/results.csv", "method,value\nseakr,1\n")
        from seakr_repro.runs.runner import mark_current
        for run in run_plan.planned_runs(self.cfg):
            if run.step == name:
                path = self.res / run.folder / f"{run.label}-abc.jsonl"
                if not path.is_file():              # the runner resumes: finished runs stay as they are
                    self._write(path.relative_to(self.res).as_posix(), '{"id": "q0", "answer": "x", "golds": ["x"]}\n')
                if run.folder.startswith("runs/"):
                    mark_current(path)
        return 1.0


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "TABLES_DIR", tmp_path / "tables")
    monkeypatch.setattr(paths, "FIGURES_DIR", tmp_path / "figures")
    res = tmp_path / "results" / "smoke"
    fake = FakeSteps(res)
    first = pipeline.plan("smoke", results=res, execute=fake)
    assert {p.action for p in first} == {"run"} and len(fake.ran) == len(first)
    fake.ran.clear()
    return res, fake


def _actions(planned):
    return {p.name: p.action for p in planned}


def test_editing_n_boot_reruns_03_and_only_the_steps_whose_inputs_changed(tree):
    res, fake = tree
    n_boot = {N03: {"N_BOOT": 77}}
    dry = {p.name: p for p in pipeline.plan("smoke", results=res, parameters=n_boot)}
    assert dry[N03].action == "run" and dry[N03].reasons == ["parameters N_BOOT 50 -> 77"]
    # what reads 03 cannot be judged before 03 has run: "may run", never "ran again"
    for name in ("04-complex-qa", "05-simple-qa", "06-ablations", "09-efficiency", "11-mechanisms", "90-render"):
        assert dry[name].action == "may-run", name
    assert dry["04-complex-qa"].reasons == [f"may run, if {N03}'s calibration changes"]
    assert dry["08-case-studies"].reasons == ["may run, if 04-complex-qa's outputs change"]
    assert {dry[n].action for n in ("00-prepare-data", "01-build-bm25-index", "02-extract-hidden-states",
                                    "07-backbones")} == {"up-to-date"}
    assert "1 step(s) would run, 8 more may run" in pipeline.dry_run_report(list(dry.values()))
    # 03's delta.json is byte-identical (only its AUROC intervals changed): 90 alone draws them
    pipeline.plan("smoke", results=res, parameters=n_boot, execute=fake)
    assert fake.ran == [N03, "90-render"]
    assert set(_actions(pipeline.plan("smoke", results=res, parameters=n_boot)).values()) == {"up-to-date"}
    # a new threshold is read by 04, 05, 06, 09 and 11; 04's and 05's outputs did not change,
    # so 08 and 10 (which read them) stay
    fake.ran.clear()
    fake.delta = -5.0
    pipeline.plan("smoke", results=res, parameters={N03: {"N_BOOT": 78}}, execute=fake)
    assert fake.ran == [N03, "04-complex-qa", "05-simple-qa", "06-ablations", "09-efficiency",
                        "11-mechanisms", "90-render"]


def test_a_deleted_data_set_s_runs_are_named_shown_as_0_of_n_and_run_again(tree, monkeypatch):
    res, fake = tree
    monkeypatch.setattr(status, "RESULTS_ROOT", res.parent)
    monkeypatch.setattr(run_plan, "RESULTS_ROOT", res.parent)
    cfg = load_config("smoke")
    dataset = cfg["datasets.complex"][0]
    gone = sorted(p.name for p in (res / "runs" / dataset).glob("*.jsonl"))
    for p in (res / "runs" / dataset).iterdir():
        p.unlink()
    (res / "runs" / dataset).rmdir()
    dry = {p.name: p for p in pipeline.plan("smoke", results=res)}
    assert dry["04-complex-qa"].reasons == [f"its 6 runs on {dataset} are missing: cot, dragin, flare, "
                                            f"ircot and 2 more (runs/{dataset}/)"]   # Table 1's six rows
    assert dry["06-ablations"].action == "run"            # the ablations run on that set too
    assert dry["05-simple-qa"].action == "up-to-date"     # simple QA: other data sets
    # status lists every planned run: the deleted ones as 0 of their total, "missing"
    runs = status.run_status(cfg)
    missing = runs[(runs["dataset"] == dataset) & runs["file"].str.startswith("runs/")]
    assert len(missing) == len(gone) and set(missing["config"]) == {"missing"}
    assert set(missing["done"]) == {0}
    assert set(runs[(runs["dataset"] != dataset) & runs["file"].str.startswith("runs/")]["config"]) == {"current"}
    assert set(runs[runs["file"].str.startswith("09-efficiency/")]["config"]) == {""}   # Table 7: no record
    # reproduce runs the steps again; their runs are written again, nothing else re-runs
    pipeline.plan("smoke", results=res, execute=fake)
    assert set(fake.ran) >= {"04-complex-qa", "06-ablations"} and "05-simple-qa" not in fake.ran
    assert sorted(p.name for p in (res / "runs" / dataset).glob("*.jsonl")) == gone
    assert set(_actions(pipeline.plan("smoke", results=res)).values()) == {"up-to-date"}


def test_a_deleted_output_file_makes_its_step_stale(tree):
    res, fake = tree
    (res / "calibration" / "delta.json").unlink()
    dry = {p.name: p for p in pipeline.plan("smoke", results=res)}
    assert dry[N03].reasons == ["its output calibration/delta.json is missing"]
    (res / N03 / "estimator_auroc.csv").write_text("edited by hand\n")
    (res / N03 / "estimator_auroc.csv.provenance.json").write_text("{}")     # not content
    assert "its output 03-uncertainty-estimators/estimator_auroc.csv is changed after it ran" in \
        {p.name: p for p in pipeline.plan("smoke", results=res)}[N03].reasons


def test_a_stamp_from_before_content_hashes_is_read_without_running_anything(tree):
    res, fake = tree
    stamps = {p.stem: p for p in (res / "stamps").glob("*.json") if p.name != "hashes.json"}
    old = {name: json.loads(p.read_text()) for name, p in stamps.items()}
    for name, stamp in old.items():        # as the previous reproduce wrote them: the stamps it read
        for key in ("graph", "outputs"):
            stamp.pop(key)
        stamp["digest"] = f"old digest of {name}"
        stamp["inputs"] = {r.split(":")[0]: f"old digest of {r.split(':')[0]}" for r in stamp["inputs"]}
    for name, stamp in old.items():
        stamps[name].write_text(json.dumps(stamp))
    assert set(_actions(pipeline.plan("smoke", results=res)).values()) == {"up-to-date"}
    pipeline.plan("smoke", results=res, execute=fake)      # reproduce: nothing runs, stamps filled in
    assert fake.ran == []
    assert json.loads((res / "stamps" / "04-complex-qa.json").read_text())["graph"] == graph.GRAPH_VERSION
    # and the next change is judged by content already
    pipeline.plan("smoke", results=res, parameters={N03: {"N_BOOT": 77}}, execute=fake)
    assert fake.ran == [N03, "90-render"]


def test_an_old_stamp_still_sees_a_step_it_read_run_again(tree):
    """The old rule holds for a stamp from before content hashes: 04 read 03, and 03 ran since."""
    res, fake = tree
    for name in ("03-uncertainty-estimators", "04-complex-qa"):
        path = res / "stamps" / f"{name}.json"
        stamp = json.loads(path.read_text())
        for key in ("graph", "outputs"):
            stamp.pop(key)
        stamp["digest"] = f"old digest of {name}"
        ups = [r.split(":")[0] for r in stamp["inputs"]]        # the stamps it read, as they are
        stamp["inputs"] = {u: json.loads((res / "stamps" / f"{u}.json").read_text())["digest"] for u in ups}
        path.write_text(json.dumps(stamp))
    assert _actions(pipeline.plan("smoke", results=res))["04-complex-qa"] == "up-to-date"
    pipeline.plan("smoke", results=res, only=["03"], force=True, execute=fake)     # 03 runs, 04 not
    dry = {p.name: p for p in pipeline.plan("smoke", results=res)}
    assert dry["04-complex-qa"].reasons == ["a step it reads ran again since its stamp (from before "
                                            "content hashes): 03-uncertainty-estimators"]


def test_a_shared_run_file_may_grow_but_not_shrink(tree):
    res, fake = tree
    dataset = load_config("smoke")["datasets.complex"][0]
    shared = res / "runs" / dataset / "seakr-abc.jsonl"           # 04's, 06's and 10's SeaKR run
    assert len(list(shared.parent.glob("seakr-*.jsonl"))) == 1
    (shared.parent / "cot-abc.jsonl").unlink()
    assert {p.name: p for p in pipeline.plan("smoke", results=res)}["04-complex-qa"].reasons == [
        f"its run of cot on {dataset} is missing (runs/{dataset}/cot-abc.jsonl)"]
    pipeline.plan("smoke", results=res, execute=fake)
    with open(shared, "a") as fh:                                 # 10 ran more of its questions
        fh.write('{"id": "q1", "answer": "x", "golds": ["x"]}\n')
    assert set(_actions(pipeline.plan("smoke", results=res)).values()) == {"up-to-date"}
    shared.write_text("")                                         # cut by hand
    dry = {p.name: p for p in pipeline.plan("smoke", results=res)}
    assert f"its run of seakr on {dataset} lost questions: 0 of 1" in dry["04-complex-qa"].reasons


def test_runs_a_param_adds_are_outputs_of_their_step(tree):
    """`reproduce --param 09-efficiency.METHODS=[...]` plans the runs the notebook is given: a
    deleted run file of a method only the --param names makes 09 stale, as the profile's own do."""
    res, fake = tree
    params = {"09-efficiency": {"METHODS": ["cot", "flare", "seakr"]}}
    fake.cfg = run_plan.with_parameters(fake.cfg, params)
    pipeline.plan("smoke", results=res, parameters=params, execute=fake)
    assert fake.ran[0] == "09-efficiency"
    flare = sorted((res / "09-efficiency").rglob("flare-*.jsonl"))
    assert flare and set(_actions(pipeline.plan("smoke", results=res, parameters=params)).values()) == {"up-to-date"}
    flare[0].unlink()
    dry = {p.name: p for p in pipeline.plan("smoke", results=res, parameters=params)}
    assert dry["09-efficiency"].action == "run" and "flare" in " ".join(dry["09-efficiency"].reasons)
