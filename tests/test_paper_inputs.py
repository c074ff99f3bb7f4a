"""The paper profile's inputs as a real run meets them (issue 22, points 1, 2 and 5): simple QA's
questions come from the top-10 file as main_simpleqa.py takes them; one question's own problem is
a recorded failure, not the end of the run; preflight names the top-10 files and the official
clone; a skipped row keeps the path and the fix; step 02 prompts with the official examples."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fakes import FakeBackend, FakeSearcher
from seakr_repro.runs import inputs
from seakr_repro.core import paths
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, QuestionError
from seakr_repro.data.records import QuestionRecord
from seakr_repro.data.registry import top10_questions
from seakr_repro.runs import grid, runner
from seakr_repro.steps import prepare
from seakr_repro.steps.render import failure_note
from seakr_repro.runs import preflight

FIX = Path(__file__).parent / "fixtures"
QA = ("who sings does he love me with reba\t['Linda Davis']\n"
      "who got the first nobel prize in physics\t['Wilhelm Conrad Röntgen']\n"
      "when is the next deadpool movie being released\t['May 18 , 2018']\n")


@pytest.fixture
def raw(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path / "raw")
    (tmp_path / "raw" / "dpr").mkdir(parents=True)
    (tmp_path / "raw" / "singlehop_data").mkdir()
    (tmp_path / "raw" / "dpr" / "nq-test.qa.csv").write_text(QA, encoding="utf-8")
    return tmp_path / "raw"


def _top10(path: Path, questions, columns: bool = False) -> None:
    recs = [{"question": q, "ctxs": [{"doc": f"passage about {q}"}]} for q in questions]
    if columns:      # what pandas' DataFrame.to_json writes
        recs = {"question": {str(i): r["question"] for i, r in enumerate(recs)},
                "ctxs": {str(i): r["ctxs"] for i, r in enumerate(recs)}}
    path.write_text(json.dumps(recs), encoding="utf-8")


# -- 1: the top-10 file's questions, the dev file's golds --------------------------------------------

@pytest.mark.parametrize("columns", [False, True])
def test_simple_qa_evaluates_the_top10_files_questions(raw, columns):
    _top10(raw / "singlehop_data" / "nq_top10.json",
           ["when is the next deadpool movie being released", "who sings does he love me with reba ",
            "a question the dev file lacks", "who sings does he love me with reba"], columns)
    records, note = top10_questions("nq")
    assert [r.question for r in records] == ["when is the next deadpool movie being released",
                                            "who sings does he love me with reba"]     # the file's order
    assert [r.id for r in records] == ["nq-test-2", "nq-test-0"]    # the dev file's ids: training stays apart
    assert records[1].answers == ["Linda Davis"]
    assert (note["in_file"], note["matched"], note["unmatched"], note["repeated"]) == (4, 2, 1, 1)


def test_step00_prepares_simple_qa_from_the_top10_file_and_reports_the_unmatched(raw, tmp_path, monkeypatch,
                                                                                capsys):
    monkeypatch.setattr(prepare, "results_dir", lambda p: tmp_path / "results" / p)
    monkeypatch.setattr(inputs, "results_dir", lambda p: tmp_path / "results" / p)
    _top10(raw / "singlehop_data" / "nq_top10.json",
           ["who got the first nobel prize in physics", "not in the dev file"])
    cfg = load_config("paper", {"datasets.simple": ["nq"], "datasets.complex": []})
    loaded = prepare.prepare_datasets(cfg)
    assert [r.question for r in loaded["nq"]] == ["who got the first nobel prize in physics"]
    assert "1 of the 2 questions" in capsys.readouterr().out
    notes = prepare.source_notes(cfg)
    assert notes["nq"]["unmatched"] == 1
    assert prepare.dataset_statistics(loaded, notes).loc[0, "unmatched_questions"] == 1
    # bm25 (the default profile's way): every question of the .qa.csv, no note
    bm25 = load_config("paper", {"datasets.simple": ["nq"], "datasets.complex": [],
                                 "seakr.simple_qa_passages": "bm25"})
    assert len(prepare.prepare_datasets(bm25)["nq"]) == 3 and not prepare.source_notes(bm25)


def test_a_missing_top10_file_stops_step00_with_where_to_get_it(raw, tmp_path, monkeypatch):
    monkeypatch.setattr(prepare, "results_dir", lambda p: tmp_path / "results" / p)
    monkeypatch.setattr(inputs, "results_dir", lambda p: tmp_path / "results" / p)
    cfg = load_config("paper", {"datasets.simple": ["nq"], "datasets.complex": []})
    with pytest.raises(DataMissingError, match="singlehop_data.zip") as err:
        prepare.prepare_datasets(cfg)
    assert str(raw / "singlehop_data" / "nq_top10.json") in str(err.value)


class _Method:
    """Answers every question but the one whose text the passages file lacks."""
    name, config = "fake", {}

    def run(self, record):
        from seakr_repro.methods.base import MethodResult
        if record.id == "bad":
            raise QuestionError("the question 'x?' is not in the precomputed passages", path="nq_top10.json")
        return MethodResult(answer="Ann", raw_output="So the answer is Ann.")


def test_one_questions_own_failure_is_recorded_and_the_run_goes_on(tmp_path):
    records = [QuestionRecord(id=i, question=f"{i}?", answers=["Ann"]) for i in ("a", "bad", "c")]
    path = tmp_path / "run.jsonl"
    rows = runner.run_method(_Method(), records, path, progress=False)
    assert [r["id"] for r in rows] == ["a", "bad", "c"]
    bad = rows[1]
    assert bad["answer"] == "" and bad["em"] == 0 and "not in the precomputed passages" in bad["failed"]
    assert "nq_top10.json" in bad["failed"] and "failed" not in rows[0]
    again = runner.run_method(_Method(), records, path, progress=False)      # resume: recorded, not redone
    assert len(path.read_text().splitlines()) == 3 and len(again) == 3
    assert runner.summarise(rows)["failed"] == 1
    note = failure_note(pd.DataFrame([{"method": "seakr", "dataset": "nq", "metric": m, "failed": 1}
                                      for m in ("em", "f1")]))
    assert "seakr on nq 1" in note and note.count("seakr") == 1
    assert failure_note(pd.DataFrame([{"method": "seakr", "dataset": "nq", "failed": 0}])) == ""


def test_a_question_missing_from_the_passages_is_a_question_error():
    from seakr_repro.retrieval.passages import PrecomputedPassages
    with pytest.raises(QuestionError):
        PrecomputedPassages(FIX / "dpr" / "nq_top10.json").search("Some other question?", 3)


# -- 2: preflight and skipped rows --------------------------------------------------------------------

def test_preflight_names_a_missing_top10_file_even_with_the_qa_csv_there(raw):
    cfg = load_config("paper", {"datasets.simple": ["nq"], "datasets.complex": []})
    report = preflight.Report()
    preflight.check_datasets(cfg, report)
    assert "data set nq" in report.ok
    assert any("top-10 passages of nq" in p and str(raw / "singlehop_data" / "nq_top10.json") in p
               and "singlehop_data.zip" in p for p in report.problems)
    _top10(raw / "singlehop_data" / "nq_top10.json", ["q"])
    report = preflight.Report()
    preflight.check_datasets(cfg, report)
    assert not report.problems and any("top-10 passages of nq" in x for x in report.ok)


def test_preflight_checks_the_official_clone(raw):
    cfg = load_config("paper")
    report = preflight.Report()
    preflight.check_prompts(cfg, report)
    assert any("SeaKR's clone" in p and str(raw / "SeaKR" / "SEAKR" / "dataset.py") in p
               and "git clone https://github.com/THU-KEG/SeaKR" in p for p in report.problems)
    shutil.copytree(FIX / "official_repo", raw / "SeaKR")       # the default place, data/raw/SeaKR
    report = preflight.Report()
    preflight.check_prompts(cfg, report)
    assert report.ok == [f"SeaKR's clone ({cfg['prompts.official_repo']})"]
    # what is left: DRAGIN's clone, which the paper profile's faithful baselines read, with its path
    assert len(report.problems) == 1 and "DRAGIN's clone (prompts.dragin_repo)" in report.problems[0]
    assert str(raw / "DRAGIN" / "src" / "data.py") in report.problems[0]
    report = preflight.Report()
    preflight.check_prompts(load_config("default"), report)      # paper demos: no clone needed
    assert not report.problems and not report.ok


def test_settings_under_data_raw_follow_the_raw_folder(raw):
    assert paths.setting_path("data/raw/SeaKR") == raw / "SeaKR"
    assert paths.setting_path("params/x.yaml") == paths.REPO_ROOT / "params" / "x.yaml"
    assert paths.setting_path("/abs/psgs_w100.tsv") == Path("/abs/psgs_w100.tsv")


def test_a_skipped_row_keeps_the_path_and_how_to_get_it(monkeypatch, tmp_path):
    from seakr_repro.artifacts import RunSpec

    record = QuestionRecord(id="q1", question="Who?", answers=["Ann"])
    monkeypatch.setattr(inputs, "load_prepared", lambda cfg, dataset: [record])
    monkeypatch.setattr(grid, "deltas_for", lambda cfg: {"eigen": -6.0})
    monkeypatch.setattr("seakr_repro.runs.disk_needs.require_for_runs", lambda cfg: None)
    cfg = load_config("paper", {"seakr.simple_qa_passages_path": str(tmp_path / "sq_top10.json")})
    pool = grid.BackendPool(cfg, loader=lambda c, name: FakeBackend(lambda p, s: "x"))
    _, skipped = grid.run_grid(cfg, pool, FakeSearcher([]), [RunSpec("seakr", "seakr")], ["squad"],
                               progress=False)
    assert str(tmp_path / "sq_top10.json") in skipped["seakr"] and "singlehop_data.zip" in skipped["seakr"]


# -- 5: step 02 prompts with the profile's examples ---------------------------------------------------

@pytest.mark.parametrize("profile, first", [("paper", "Question: What instrument does Lio Brandt play?"),
                                            ("default", "Question: ")])
def test_step02_uses_the_official_prompt_when_the_profile_says_so(monkeypatch, tmp_path, profile, first):
    import seakr_repro.llm.base as base
    from seakr_repro.steps import extraction

    repo = tmp_path / "SeaKR"
    shutil.copytree(FIX / "official_repo", repo)
    seen = []

    def capture(backend, prompts, **kw):
        seen.extend(prompts)
        raise RuntimeError("stop here")
    monkeypatch.setattr(base, "generate_and_sample_many", capture)
    cfg = load_config(profile, {"prompts.official_repo": str(repo)})
    record = QuestionRecord(id="q", question="Who?", answers=["Ann"])
    with pytest.raises(RuntimeError, match="stop here"):
        extraction.extract_question(FakeBackend(lambda p, s: ""), record, cfg, n_shot=1)
    assert seen[0].startswith(first)
    assert ("Lio Brandt" in seen[0]) == (profile == "paper")


def test_an_absent_backbone_is_skipped_with_the_setting_that_would_fill_it():
    from seakr_repro.steps import tables

    def loader(cfg, name):
        raise DataMissingError(f"the weights of {name} are not on this machine",
                               setting=f"model.paths.{name}", fix="download them and set the path")
    cfg = load_config("paper")
    _, skipped, _ = tables.run_backbones(cfg, grid.BackendPool(cfg, loader=loader), FakeSearcher([]),
                                         ["llama-3-8b"], ["nq"], 1, [], 2, progress=False)
    assert "model.paths.llama-3-8b" in skipped["llama-3-8b"] and "download them" in skipped["llama-3-8b"]
