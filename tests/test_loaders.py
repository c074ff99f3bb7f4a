"""Question loaders on small fixtures in the real formats, the real FanOutQA dev set, and the
error messages users see for missing or malformed files."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from seakr_repro.core import paths
from seakr_repro.data import (
    DATASETS,
    QuestionRecord,
    dataset_available,
    describe_missing,
    load_2wiki,
    load_dataset,
    load_dpr_qa,
    load_fanoutqa,
    load_hotpotqa,
    load_iirc,
    render_answer,
    sample,
)
from seakr_repro.core.errors import DataMissingError, UserError

FIX = Path(__file__).parent / "fixtures" / "datasets"


# ---------------------------------------------------------------- records and sampling

def test_golds_dedupe_in_order_and_dict_round_trip():
    rec = QuestionRecord("q1", "Q?", ["Jaws", "jaws"], ["Jaws (film)", "Jaws"], "comparison",
                         ["Jaws (film)"], "2wiki", {"answer_id": "Q189505"})
    assert rec.golds == ["Jaws", "jaws", "Jaws (film)"]
    assert QuestionRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


def test_sample_is_deterministic_nested_and_none_keeps_all():
    items = list(range(100))
    a, b = sample(items, 10, seed=1), sample(items, 10, seed=1)
    assert a == b and len(set(a)) == 10
    assert sample(items, 30, seed=1)[:10] == a          # smaller samples are prefixes of larger
    assert sample(items, 10, seed=2) != a
    assert sample(items, None) == items
    assert sorted(sample(items, 500, seed=3)) == items  # n beyond the size: everything, shuffled
    with pytest.raises(UserError, match="non-negative"):
        sample(items, -1)


# ---------------------------------------------------------------- each loader on its fixture

def test_2wiki_aliases_demonyms_and_supporting():
    recs = load_2wiki(FIX / "2wikimultihopqa")
    assert [r.id for r in recs] == ["b7e1f2c40bdd11eba7f7acde48001122",
                                    "c02d8a3e0bdd11eba7f7acde48001122",
                                    "d4a91b100bdd11eba7f7acde48001122"]
    first = recs[0]
    assert first.answers == ["Cincinnati"] and first.type == "compositional"
    assert first.aliases == ["Cincinnati, Ohio", "Queen City", "Porkopolis"]   # the official golds
    assert first.extra["demonyms"] == ["Cincinnatian"]
    assert first.supporting == ["Jaws (film)", "Steven Spielberg"]
    assert recs[1].golds == ["Jaws", "Jaws (film)"]  # the alias equal to the answer is not repeated
    # answer_id with no alias line: no aliases; supporting_passage_ids wins over titles.
    assert recs[2].aliases == [] and recs[2].supporting == ["wiki-1204", "wiki-87"]
    assert recs[2].extra["supporting_titles"] == ["Niels Bohr", "Albert Einstein"]
    assert load_2wiki(FIX / "2wikimultihopqa" / "dev.json")[0] == first  # the file path works too


def test_2wiki_golds_are_the_aliases_as_the_official_evaluation_reads_them():
    from seakr_repro.data.loaders import twowiki_golds
    from seakr_repro.evaluation import exact_match
    recs = load_2wiki(FIX / "2wikimultihopqa")
    official = twowiki_golds(recs, "official")
    assert exact_match("Queen City", official[0].golds) == 1
    assert exact_match("Cincinnatian", official[0].golds) == 0      # a demonym is not a gold there
    both = twowiki_golds(recs, "with_demonyms")
    assert both[0].aliases == ["Cincinnati, Ohio", "Queen City", "Porkopolis", "Cincinnatian"]
    assert exact_match("Cincinnatian", both[0].golds) == 1 and recs[0].aliases == official[0].aliases
    with pytest.raises(UserError, match="twowiki_golds"):
        twowiki_golds(recs, "all")


def test_hotpotqa_fields_and_unique_supporting_titles():
    recs = load_hotpotqa(FIX / "hotpotqa")
    assert [r.answers for r in recs] == [["yes"], ["Chief of Protocol"]]
    assert [r.type for r in recs] == ["comparison", "bridge"]
    assert recs[1].supporting == ["Kiss and Tell (1945 film)", "Shirley Temple"]
    assert recs[0].extra["level"] == "hard" and all(r.source == "hotpotqa" for r in recs)


def test_iirc_skips_none_and_reads_each_answer_type():
    recs = load_iirc(FIX / "iirc" / "dev.json")
    by_id = {r.id: r for r in recs}
    assert list(by_id) == ["q_2001", "q_2002", "q_2004"]          # q_2003 ("none") skipped
    assert by_id["q_2001"].answers == ["Eastern Cape", "Eastern Cape Province"]  # spans, stripped
    assert by_id["q_2001"].supporting == ["Thomas Bain", "graaff-reinet"]        # "main" -> title
    assert by_id["q_2002"].answers == ["44"] and by_id["q_2002"].extra["answer_unit"] == "years"
    assert by_id["q_2004"].answers == ["yes"] and by_id["q_2004"].type == "binary"


def test_dpr_csv_literal_lists():
    recs = load_dpr_qa(FIX / "dpr" / "nq-test.qa.csv")
    assert len(recs) == 4 and recs[0].source == "nq" and recs[0].id == "nq-test-0"
    assert recs[0].answers == ["Wilhelm Conrad Röntgen"]
    assert recs[2].answers == ["Olivia", "MFSK"]
    assert recs[3].question == "who wrote the children's book green eggs and ham"
    assert recs[3].answers == ["Dr. Seuss", "Theodor Seuss Geisel"]


def test_dpr_retriever_json_positive_ids_and_optional_keys():
    recs = load_dpr_qa(FIX / "dpr" / "nq-dev.json")
    assert recs[0].id == "nq-dev-0" and recs[0].supporting == ["11828866", "4437893"]
    assert recs[0].type == "single-hop"
    assert (recs[1].id, recs[1].type, recs[1].supporting) == ("single-7", "triviaqa", ["wiki-310"])


# ---------------------------------------------------------------- FanOutQA, the real shipped file

@pytest.fixture(scope="module")
def fanout_sub():
    return load_fanoutqa(level="sub")


def test_fanoutqa_top_level():
    recs = load_fanoutqa(level="top")
    assert len(recs) == 310 and len({r.id for r in recs}) == 310
    first = recs[0]
    assert first.question.startswith("What is the batting hand of each of the first five picks")
    assert first.answers == ["Pat Burrell - Right\nMark Mulder - Left\nCorey Patterson - Left\n"
                             "Jeff Austin - Right\nJD Drew - Left"]
    assert first.extra["answer_leaves"][:2] == ["Pat Burrell", "Mark Mulder"]
    assert "J. D. Drew" in first.supporting and all(r.answers for r in recs)


def test_fanoutqa_sub_questions(fanout_sub):
    assert len(fanout_sub) == 2193
    assert len({r.id for r in fanout_sub}) == 2193  # ids made unique by the parent question's id
    single = [r for r in fanout_sub if r.extra["single_value"]]
    assert len(single) == 1788
    assert all(r.type == "fanoutqa-sub" and len(r.supporting) == 1 for r in single)
    assert {r.extra["depth"] for r in fanout_sub} == {1, 2, 3}
    burrell = next(r for r in fanout_sub if r.question == "What is the batting hand of Pat Burrell?")
    assert burrell.answers == ["Right"] and burrell.supporting == ["Pat Burrell"]


def test_render_answer_matches_fanoutqa_conventions():
    assert render_answer(True) == "yes" and render_answer(61.6) == "61.6"
    assert render_answer(["a", 2]) == "a\n2" and render_answer({"x": False}) == "x - no"


def test_fanoutqa_test_split_is_refused():
    with pytest.raises(UserError, match="held out"):
        load_fanoutqa(split="test")


# ---------------------------------------------------------------- errors users see

def _copy(tmp_path: Path, rel: str) -> Path:
    src = FIX / rel
    dst = tmp_path / rel
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    return dst


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(DataMissingError) as e:
        load_hotpotqa(tmp_path / "nowhere.json")
    msg = str(e.value)
    assert "nowhere.json" in msg and "hotpot_dev_distractor_v1.json" in msg and "Fix:" in msg
    with pytest.raises(DataMissingError, match="id_aliases.json"):
        folder = _copy(tmp_path, "2wikimultihopqa")
        (folder / "id_aliases.json").unlink()
        load_2wiki(folder)


def test_malformed_json_names_file_and_line(tmp_path):
    bad = tmp_path / "dev.json"
    bad.write_text('[\n  {"qid": "x",\n   "questions": [}\n]\n', encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_iirc(bad)
    assert str(bad) in str(e.value) and "line 3" in str(e.value) and "Fix:" in str(e.value)


def test_malformed_csv_line_names_the_line(tmp_path):
    bad = tmp_path / "trivia-test.qa.csv"
    bad.write_text("q one\t['a']\nq two\t['b', \n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_dpr_qa(bad)
    assert "trivia-test.qa.csv, line 2" in str(e.value) and "Fix:" in str(e.value)
    bad.write_text("q one\t['a']\nq two without answers\n", encoding="utf-8")
    with pytest.raises(UserError, match="line 2.*no tab-separated answer list"):
        load_dpr_qa(bad)


def test_missing_key_and_wrong_type_name_the_record(tmp_path):
    folder = _copy(tmp_path, "2wikimultihopqa")
    data = json.loads((folder / "dev.json").read_text(encoding="utf-8"))
    del data[1]["question"]
    (folder / "dev.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_2wiki(folder)
    msg = str(e.value)
    assert "dev.json" in msg and "record 2" in msg and "c02d8a3e0bdd11eba7f7acde48001122" in msg
    assert "'question'" in msg and "Fix:" in msg

    path = _copy(tmp_path, "dpr/nq-dev.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    data[0]["answers"] = "Linda Davis"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UserError, match=r"record 1: 'answers' is a string, expected a JSON list"):
        load_dpr_qa(path)


def test_malformed_alias_line_names_the_line(tmp_path):
    folder = _copy(tmp_path, "2wikimultihopqa")
    with open(folder / "id_aliases.json", "a", encoding="utf-8") as fh:
        fh.write('{"Q_id": "Q1", "aliases": "universe"}\n')
    with pytest.raises(UserError, match=r"id_aliases.json, line 4.*'aliases' is a string"):
        load_2wiki(folder)


def test_iirc_unknown_answer_type(tmp_path):
    path = _copy(tmp_path, "iirc/dev.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    data[1]["questions"][0]["answer"]["type"] = "multiple"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UserError, match=r"passage 2, question 1 \(qid 'q_2004'\): unknown answer type"):
        load_iirc(path)


# ---------------------------------------------------------------- the registry

def test_registry_table_and_unknown_name():
    assert {"2wiki", "hotpotqa", "iirc", "nq", "triviaqa", "squad", "fanoutqa", "fanoutqa-sub",
            "bundled-2wiki", "bundled-hotpotqa", "bundled-single"} <= set(DATASETS)
    sizes = {k: DATASETS[k].paper_size for k in ("2wiki", "hotpotqa", "iirc", "nq", "triviaqa", "squad")}
    assert sizes == {"2wiki": 12576, "hotpotqa": 7405, "iirc": 954, "nq": 3610,
                     "triviaqa": 11313, "squad": 7357}
    with pytest.raises(UserError, match="unknown data set 'wiki2'.*2wiki, hotpotqa"):
        load_dataset("wiki2")


def test_registry_missing_raw_data_gives_instructions(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path)
    assert not dataset_available("nq")
    text = describe_missing("nq")
    assert str(tmp_path / "dpr" / "nq-test.qa.csv") in text and "data.retriever.qas.nq-test" in text
    with pytest.raises(DataMissingError, match="download_data.py"):
        load_dataset("nq")


def test_registry_loads_raw_layout_with_sampling(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path)
    _copy(tmp_path, "2wikimultihopqa")
    assert dataset_available("2wiki")
    recs = load_dataset("2wiki", n=2, seed=7)
    assert len(recs) == 2 and recs == load_dataset("2wiki", n=2, seed=7)
    assert all(r.source == "2wiki" for r in recs)
    assert len(load_dataset("fanoutqa-sub", n=5)) == 5


@pytest.mark.parametrize("name", ["bundled-2wiki", "bundled-hotpotqa", "bundled-single"])
def test_bundled_sets_load_when_present(name):
    if not dataset_available(name):
        pytest.skip(f"{name} not written yet: {describe_missing(name)}")
    recs = load_dataset(name)
    assert recs and len({r.id for r in recs}) == len(recs)
    assert all(r.question and r.answers and r.source == name for r in recs)


def test_training_splits_load_from_their_places_in_the_original_formats(tmp_path, monkeypatch):
    """Each evaluation set names its training split; the files sit beside the dev files, in the
    dev files' formats (the fixtures copied under the training names stand in for them)."""
    import shutil

    from seakr_repro.data.registry import TRAIN_SPLITS

    assert set(TRAIN_SPLITS) == {"2wiki", "hotpotqa", "iirc", "nq", "triviaqa", "squad"}
    assert all(DATASETS[t].kind == DATASETS[d].kind for d, t in TRAIN_SPLITS.items())
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path)
    assert not any(dataset_available(t) for t in TRAIN_SPLITS.values())
    assert "hotpot_train_v1.1.json" in describe_missing("hotpotqa-train")
    assert "biencoder-squad1-train.json" in describe_missing("squad-train")
    (tmp_path / "2wikimultihopqa").mkdir()
    shutil.copy(FIX / "2wikimultihopqa" / "dev.json", tmp_path / "2wikimultihopqa" / "train.json")
    shutil.copy(FIX / "2wikimultihopqa" / "id_aliases.json", tmp_path / "2wikimultihopqa")
    (tmp_path / "hotpotqa").mkdir()
    shutil.copy(FIX / "hotpotqa" / "hotpot_dev_distractor_v1.json", tmp_path / "hotpotqa" / "hotpot_train_v1.1.json")
    (tmp_path / "dpr").mkdir()
    shutil.copy(FIX / "dpr" / "nq-test.qa.csv", tmp_path / "dpr" / "nq-train.qa.csv")
    shutil.copy(FIX / "dpr" / "nq-dev.json", tmp_path / "dpr" / "biencoder-squad1-train.json")
    for name, like in (("2wiki-train", "2wikimultihopqa/dev.json"),
                       ("hotpotqa-train", "hotpotqa/hotpot_dev_distractor_v1.json"),
                       ("nq-train", "dpr/nq-test.qa.csv"), ("squad-train", "dpr/nq-dev.json")):
        assert dataset_available(name)
        records = load_dataset(name)
        assert records and {r.source for r in records} == {name}
        assert [r.question for r in records] == [r.question for r in load_dataset(
            name.split("-")[0] if name != "squad-train" else "nq", path=FIX / like)]
    assert {r.id for r in load_dataset("nq-train")}.isdisjoint(
        {r.id for r in load_dataset("nq", path=FIX / "dpr" / "nq-test.qa.csv")})
