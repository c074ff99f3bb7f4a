"""The official code's inputs, read from the user's files: its demo lists (from a clone of the
SeaKR repository) and the precomputed DPR top-10 passages main_simpleqa.py scores.

The clone is a fixture laid out like the repository (tests/fixtures/official_repo) with invented
demo text; no text of the official code is in this repository."""
import json
import shutil
from pathlib import Path

import pytest

from fakes import FakeBackend, FakeSearcher, hit
from seakr_repro.data import loaders
from seakr_repro.data.loaders import load_dpr_top_passages
from seakr_repro.data.records import QuestionRecord
from seakr_repro.data.registry import describe_missing, top_passages_path
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.methods import build_method
from seakr_repro.prompts import build_prompt, demos_for, official_demos

FIX = Path(__file__).parent / "fixtures"
DPR = FIX / "dpr" / "nq-test-retrieval.json"
PACKED = FIX / "dpr" / "nq_top10.json"


@pytest.fixture
def repo(tmp_path):
    dst = tmp_path / "SeaKR"
    shutil.copytree(FIX / "official_repo", dst)
    return dst


# -- demos -----------------------------------------------------------------------------------------

def test_official_demos_are_parsed_without_running_the_file(repo):
    two = official_demos(repo, "2wiki")   # the file raises SystemExit and imports a missing module
    assert [d.answer for d in two] == ["Bram Ostler", "Lisbon"]
    assert two[1].steps == ("Glass Harbour was directed by Dr. Ivo Kell.", "Ivo Kell died in Lisbon.")
    assert official_demos(repo, "hotpotqa")[0].steps == ("The Vell is 210 km long.", "The Orn is 95 km long.")
    assert len(official_demos(repo, "iirc")) == 1
    assert demos_for("nq", 10, "official", str(repo)) == list(official_demos(repo, "simple"))
    assert demos_for("bundled-2wiki", 1, "official", str(repo)) == [two[0]]


def test_official_prompt_is_the_code_format_character_for_character(repo):
    """Dataset.__call__: prefix + blank line + instruction; steps joined by one space after their
    periods were deleted, unstripped -- so a step returned with its leading space reads '1901.  Bram'."""
    demos = demos_for("2wiki", 10, "official", str(repo))
    prompt = build_prompt(demos, "Who is older?", ["Ada Quill was born on 3 May 1901",
                                                   " Bram Ostler was born on 9 June 1899"],
                          mode="faithful")
    assert prompt == (
        "Question: Who was born first, Ada Quill or Bram Ostler?\n"
        "Answer: Ada Quill was born on 3 May 1901. Bram Ostler was born on 9 June 1899. "
        "Thus, Bram Ostler was born first. So the answer is Bram Ostler.\n\n"
        "Question: Where did the director of film Glass Harbour die?\n"
        "Answer: Glass Harbour was directed by Dr  Ivo Kell. Ivo Kell died in Lisbon. "
        "So the answer is Lisbon.\n\n"
        "Answer in the same format as before. \nQuestion: Who is older?\n"
        "Answer: Ada Quill was born on 3 May 1901.  Bram Ostler was born on 9 June 1899.")
    fixed = build_prompt(demos, "Who is older?", ["Ada Quill was born on 3 May 1901",
                                                  " Bram Ostler was born on 9 June 1899"])
    assert fixed.endswith("3 May 1901. Bram Ostler was born on 9 June 1899.")


def test_simple_qa_prompt_with_one_passage_and_no_demos(repo):
    demos = demos_for("nq", 1, "official", str(repo))
    assert build_prompt(demos, "Who?", docs=["Some passage."]) == (
        "Question: What instrument does Lio Brandt play?\n"
        "Answer: Lio Brandt is a cellist in the Nym Quartet. So the answer is cello.\n\n"
        "Context: [1] Some passage.\nAnswer in the same format as before. \nQuestion: Who?\nAnswer: ")
    # the code writes prefix + "\n\n" even when the prefix is empty (n_shot 0)
    assert build_prompt([], "Who?", mode="faithful").startswith("\n\nAnswer in the same")
    assert build_prompt([], "Who?").startswith("Answer in the same")


def test_missing_clone_or_bad_source_is_a_clear_error(tmp_path, repo):
    with pytest.raises(DataMissingError, match="prompts.official_repo.*git clone"):
        demos_for("2wiki", 2, "official", str(tmp_path / "nowhere"))
    with pytest.raises(DataMissingError, match="no clone"):
        demos_for("2wiki", 2, "official", None)
    with pytest.raises(UserError, match="prompts.demos"):
        demos_for("2wiki", 2, "figures")
    (repo / "SEAKR" / "dataset.py").write_text("class TwoWikiHop:\n    examples = [x for x in y]\n")
    with pytest.raises(UserError, match="not a literal list"):
        official_demos(repo, "2wiki")
    with pytest.raises(UserError, match="HotpotQA"):
        official_demos(repo, "hotpotqa")


def test_seakr_uses_official_demos_and_fails_early_without_the_clone(repo, tmp_path):
    backend = FakeBackend(lambda p, s: "So the answer is Lisbon.")
    m = build_method("seakr", backend, FakeSearcher([]), "bundled-2wiki", n_shot=2,
                     demos="official", official_repo=str(repo))
    m.run(QuestionRecord(id="q", question="Where?", answers=["Lisbon"]))
    assert backend.generate_calls[0][0].startswith("Question: Who was born first, Ada Quill")
    with pytest.raises(DataMissingError):
        build_method("seakr", backend, FakeSearcher([]), "bundled-2wiki", demos="official",
                     official_repo=str(tmp_path / "nowhere"))


# -- DPR top passages ------------------------------------------------------------------------------

def test_dpr_retriever_output_is_streamed_across_chunk_boundaries(monkeypatch):
    whole = load_dpr_top_passages(DPR, top=10)
    monkeypatch.setattr(loaders, "_CHUNK", 7)       # every record spans many reads
    assert load_dpr_top_passages(DPR, top=10) == whole
    q = "Who directed the film Zorro Nights?"
    assert [p["id"] for p in whole[q]] == ["101", "102", "103"]
    assert whole[q][1] == {"id": "102", "title": "Zorro Nights", "text": "Zorro Nights was directed by Ann Lee."}
    assert whole["What colour is the Quorble bird?"][1]["text"] == 'Nym has many "birds" \u2013 and few trees.'
    assert [len(v) for v in load_dpr_top_passages(DPR, top=2).values()] == [2, 2]


def test_packed_and_column_oriented_files(tmp_path):
    packed = load_dpr_top_passages(PACKED)
    assert [p["text"] for p in packed["Who directed the film Zorro Nights?"]] == [
        "Zorro Nights is a film by Bob Ray.", "Zorro Nights was directed by Ann Lee.", "Ann Lee is a director."]
    assert packed["Who directed the film Zorro Nights?"][0]["id"] == "q0-0"
    recs = json.loads(PACKED.read_text())
    cols = {"question": {str(i): r["question"] for i, r in enumerate(recs)},
            "ctxs": {str(i): r["ctxs"] for i, r in enumerate(recs)}}
    (tmp_path / "cols.json").write_text(json.dumps(cols))
    assert load_dpr_top_passages(tmp_path / "cols.json") == packed


@pytest.mark.parametrize("text, message", [
    ('{"a": 1}', "no key 'question'"),
    ('[{"question": "q", "ctxs": [{"title": "t"}]}]', "ctxs\\[0\\] has no key 'doc'"),
    ('[{"question": "q", "ctxs": []} {"question": "r"}]', "expected ',' or ']'"),
    ('[{"question": "q", "ctxs": [', "in item 1, cut short"),
    ('"just a string"', "does not start with"),
])
def test_malformed_passage_files_name_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_dpr_top_passages(path)


def test_missing_top10_file_says_where_to_get_it(tmp_path):
    with pytest.raises(DataMissingError, match="singlehop_data.zip"):
        load_dpr_top_passages(tmp_path / "nq_top10.json")
    assert top_passages_path("triviaqa").name == "tq_top10.json"
    assert "sq_top10.json" in describe_missing("squad")
    with pytest.raises(UserError):
        top_passages_path("bundled-single")


def test_simple_qa_official_scores_the_precomputed_passages_not_bm25():
    """main_simpleqa.py: the one-passage prompts use DPR's top passages of the question; no search."""
    def respond(p, stop):
        return "So the answer is Ann Lee." if "Ann Lee." in p.rsplit("\n\n", 1)[-1] else "So the answer is Tom."
    level = lambda p: "low" if "directed by Ann Lee" in p.rsplit("\n\n", 1)[-1] else "high"
    backend, searcher = FakeBackend(respond, level), FakeSearcher([hit("x", "Unrelated BM25 passage.")])
    m = build_method("seakr", backend, searcher, "nq", n_shot=1, simple_qa_passages="official",
                     simple_qa_passages_path=str(DPR))
    r = m.run(QuestionRecord(id="q", question="Who directed the film Zorro Nights?", answers=["Ann Lee"]))
    assert searcher.queries == [] and r.n_retrievals == 1
    assert r.answer == "Ann Lee" and r.extra["chosen_doc"] == "102"
    assert len(r.extra["passage_us"]) == 3
    assert not any("Unrelated" in p for p, _ in backend.generate_calls)
    with pytest.raises(UserError, match="not in the precomputed passages"):
        m.run(QuestionRecord(id="r", question="Some other question?", answers=["x"]))


def test_simple_qa_official_setting_checks(tmp_path):
    with pytest.raises(DataMissingError, match="singlehop_data"):
        build_method("seakr", FakeBackend(lambda p, s: ""), FakeSearcher([]), "nq",
                     simple_qa_passages="official", simple_qa_passages_path=str(tmp_path / "x.json"))
    with pytest.raises(UserError, match="simple_qa_passages"):
        build_method("seakr", FakeBackend(lambda p, s: ""), FakeSearcher([]), "nq",
                     simple_qa_passages="dense")
    with pytest.raises(UserError, match="simple_qa_top"):
        m = build_method("seakr", FakeBackend(lambda p, s: "x", lambda p: "high"), FakeSearcher([]), "nq",
                         simple_qa_passages="official", simple_qa_passages_path=str(DPR), simple_qa_top=3)
        m._passages.search("Who directed the film Zorro Nights?", 5)


def test_profiles_choose_the_official_inputs_in_paper_only():
    from seakr_repro.core.config import load_config
    from seakr_repro.runs.grid import method_settings
    paper, default = load_config("paper"), load_config("default")
    s = method_settings(paper, "seakr", {})
    assert (s["simple_qa_passages"], s["demos"], s["official_repo"]) == ("official", "official", "data/raw/SeaKR")
    assert (paper["retrieval.scheme"], paper["retrieval.k1"], paper["retrieval.b"]) == ("es_best_fields", 1.2, 0.75)
    d = method_settings(default, "seakr", {})
    assert (d["simple_qa_passages"], d["demos"], default["retrieval.scheme"]) == ("bm25", "paper", "single_field")
