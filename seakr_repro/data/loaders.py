"""Readers for the question files users download, in their original formats, to `QuestionRecord`s.

Every loader names the file and the record (or line) when the input is not what it expects, and
says how to get the file when it is missing. The answer conventions follow DRAGIN's data classes
(which SeaKR's code reuses) so scores are comparable with the paper:

- 2WikiMultihopQA: gold `answer`; aliases are the Wikidata aliases of `answer_id` from
  `id_aliases.json`, as SeaKR's and DRAGIN's evaluation count them; the demonyms are kept apart in
  `extra["demonyms"]`, and `with_demonyms` adds them to the aliases (2Wiki's own evaluation counts
  both; the setting `evaluation.twowiki_golds`).
- IIRC: questions whose answer type is "none" are skipped (the answerable subset); a "span" answer
  gives one gold per answer span (the stripped span texts, each accepted on its own, as DRAGIN does,
  not joined); "value" and "binary" give `answer_value` (the unit is not appended; it is kept in
  `extra["answer_unit"]`).
- FanOutQA: gold answers are strings, numbers, booleans, lists or dicts; they are rendered as
  fanoutqa's own `str_answer` does (list items one per line, dict items "key - value", booleans
  yes/no) and the flat list of strings its loose-accuracy metric looks for is `extra["answer_leaves"]`."""
from __future__ import annotations

import ast
import csv
import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..core.errors import DataMissingError, UserError
from ..core.io import iter_jsonl, read_json, require_file
from .records import QuestionRecord

HOW_TO_GET = {
    "2wiki": ("get DRAGIN's 2WikiMultihopQA preparation (the IDs release, data_ids_april7.zip, from the "
              "2WikiMultihopQA repository, github.com/Alab-NII/2wikimultihop; DRAGIN's README gives the "
              "wget line), unzip it and put dev.json and id_aliases.json in data/raw/2wikimultihopqa/"),
    "hotpotqa": ("download the HotpotQA distractor dev set (wget http://curtis.ml.cmu.edu/datasets/hotpot/"
                 "hotpot_dev_distractor_v1.json) and put it at data/raw/hotpotqa/"
                 "hotpot_dev_distractor_v1.json, or at data/raw/hotpotqa/hotpotqa-dev.json as DRAGIN's "
                 "README saves it (SeaKR's multihop_data.zip holds it there too)"),
    "iirc": ("download IIRC as DRAGIN's README does (wget https://iirc-dataset.s3.us-west-2.amazonaws.com/"
             "iirc_train_dev.tgz, tar -xzf it, mv iirc_train_dev data/raw/iirc) so that its dev.json is "
             "data/raw/iirc/dev.json; data/raw/iirc/iirc_train_dev/dev.json, the layout of SeaKR's "
             "multihop_data.zip, works too"),
    "dpr-dev": ("download DPR's retriever dev file (questions with their gold passages' ids in DPR's "
                "Wikipedia) with the DPR repository's `python data/download_data.py --resource "
                "data.retriever.nq-dev` or from https://dl.fbaipublicfiles.com/dpr/data/retriever/"
                "biencoder-nq-dev.json.gz, gunzip it and put it at data/raw/dpr/biencoder-nq-dev.json"),
    "dpr": ("download DPR's question files with the DPR repository's `python data/download_data.py "
            "--resource data.retriever.qas.nq-test` (likewise trivia-test and squad1-test; they land in "
            "downloads/data/retriever/qas/*-test.csv) or directly from "
            "https://dl.fbaipublicfiles.com/dpr/data/retriever/<name>.qa.csv.gz, gunzip them and put "
            "them at data/raw/dpr/nq-test.qa.csv, trivia-test.qa.csv and squad1-test.qa.csv"),
    "fanoutqa": "run `make setup` (or `pip install fanoutqa==1.1.1`); its wheel ships the dev set",
    "top10": ("download the SeaKR authors' packed top-10 DPR passages, singlehop_data.zip (linked from "
              "the official README, github.com/THU-KEG/SeaKR, section \"Run SeaKR on Single QA\": "
              "https://drive.google.com/file/d/1hn4Om_KkIGJpgG2wJjUu1mpPv9oq8M6G), unzip it and put "
              "nq_top10.json, tq_top10.json and sq_top10.json in data/raw/singlehop_data/ (DPR's own "
              "retriever output for a test set, a JSON list of {question, answers, ctxs}, works too: "
              "give its path as seakr.simple_qa_passages_path)"),
    "self-rag-input": ("download Self-RAG's evaluation data (its README, section \"Inference\": "
                       "https://drive.google.com/file/d/1TLKhWjez63H4uBtgCxyoyJsZi-IMgnDb; "
                       "eval_data/popqa_longtail_w_gs.jsonl is its QA command's file) or write the "
                       "questions with their retrieved passages in that format, and name the file "
                       "in self_rag.input_files.<data set>"),
    # training splits: only SKR and TAIKC (notebook 10) read them, to learn from questions that are
    # never evaluated
    "2wiki-train": ("the zip that holds 2WikiMultihopQA's dev.json (data_ids_april7.zip) also holds "
                    "train.json: put it beside dev.json and id_aliases.json in data/raw/2wikimultihopqa/"),
    "hotpotqa-train": ("download the HotpotQA training set (wget http://curtis.ml.cmu.edu/datasets/hotpot/"
                       "hotpot_train_v1.1.json) and put it at data/raw/hotpotqa/hotpot_train_v1.1.json"),
    "iirc-train": ("the IIRC archive (iirc_train_dev.tgz) also holds train.json: put it at "
                   "data/raw/iirc/train.json (or data/raw/iirc/iirc_train_dev/train.json)"),
    "dpr-train": ("download DPR's training questions from https://dl.fbaipublicfiles.com/dpr/data/retriever/ "
                  "(or with the DPR repository's data/download_data.py): nq-train.qa.csv "
                  "(--resource data.retriever.qas.nq-train), trivia-train.qa.csv.gz "
                  "(data.retriever.qas.trivia-train) and, as SQuAD has no .qa.csv training file, "
                  "biencoder-squad1-train.json.gz (data.retriever.squad1-train); gunzip them and put "
                  "them in data/raw/dpr/"),
}

_FIX = "check that this is {what} in its original format; re-download it if it was edited or cut short"


_TYPE_NAMES = {dict: "a JSON object", list: "a JSON list", str: "a string", int: "an integer",
               float: "a number", bool: "a boolean", type(None): "null"}


def _tname(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _need(obj: Any, key: str, types: type | tuple, path: Path, where: str, what: str,
          line: int | None = None, default: Any = ...) -> Any:
    """obj[key] checked against `types`; a missing key (without default) or wrong type names the record."""
    if not isinstance(obj, dict):
        raise UserError(f"{where} is {_tname(obj)}, not a JSON object", path=path, line=line,
                        fix=_FIX.format(what=what))
    if key not in obj:
        if default is not ...:
            return default
        raise UserError(f"{where} has no key '{key}'", path=path, line=line,
                        fix=_FIX.format(what=what) + f" (each record of {what} needs '{key}')")
    value = obj[key]
    if not isinstance(value, types):
        names = " or ".join(_TYPE_NAMES.get(t, t.__name__)
                            for t in (types if isinstance(types, tuple) else (types,)))
        raise UserError(f"{where}: '{key}' is {_tname(value)}, expected {names}", path=path,
                        line=line, fix=_FIX.format(what=what))
    return value


def _str_list(values: Any, key: str, path: Path, where: str, what: str, line: int | None = None) -> list[str]:
    """A list whose items must be strings or numbers (ids), returned as strings."""
    if not isinstance(values, list) or not all(isinstance(v, (str, int)) for v in values):
        raise UserError(f"{where}: '{key}' must be a list of strings", path=path, line=line,
                        fix=_FIX.format(what=what))
    return [str(v) for v in values]


def _json_list(path: Path, what: str, how: str) -> list:
    data = read_json(path, what, how)
    if not isinstance(data, list):
        raise UserError(f"{what} holds {_tname(data)} at the top level, not a list of records",
                        path=path, fix=_FIX.format(what=what))
    return data


def _where(index: int, rid: Any = None) -> str:
    """1-based record number, plus its id when known (to find it with grep)."""
    return f"record {index + 1}" + (f" (id {rid!r})" if isinstance(rid, (str, int)) else "")


def _resolve(path: str | Path, *names: str) -> Path:
    """Accept either the file itself or the folder that holds it under one of its usual names
    (the first that exists; else the first name, which the missing-file error then shows)."""
    path = Path(path)
    if not path.is_dir():
        return path
    return next((path / n for n in names if (path / n).is_file()), path / names[0])


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _supporting(rec: dict, path: Path, where: str, what: str) -> tuple[list[str], list[str]]:
    """(supporting, titles): titles of supporting_facts, overridden by supporting_passage_ids
    (which the bundled sets add, naming passages of the bundled corpus) when present."""
    facts = _need(rec, "supporting_facts", list, path, where, what)
    titles = []
    for fact in facts:
        if not (isinstance(fact, list) and fact and isinstance(fact[0], str)):
            raise UserError(f"{where}: each supporting fact must be a [title, sentence index] pair, "
                            f"got {fact!r}", path=path, fix=_FIX.format(what=what))
        titles.append(fact[0])
    titles = _unique(titles)
    if "supporting_passage_ids" in rec:
        ids = _str_list(rec["supporting_passage_ids"], "supporting_passage_ids", path, where, what)
        return ids, titles
    return titles, titles


# ---------------------------------------------------------------- multi-hop sets (DRAGIN's files)

def load_2wiki(path: str | Path, source: str = "2wiki") -> list[QuestionRecord]:
    """2WikiMultihopQA dev: a folder with dev.json and id_aliases.json (or the path of dev.json)."""
    path = Path(path)
    dev = path / "dev.json" if path.is_dir() or path.suffix != ".json" else path
    dev = require_file(dev, "2WikiMultihopQA dev.json", HOW_TO_GET["2wiki"])
    alias_file = require_file(dev.parent / "id_aliases.json", "2WikiMultihopQA id_aliases.json",
                              HOW_TO_GET["2wiki"])
    what = "2WikiMultihopQA's id_aliases.json (one JSON object per line)"
    aliases: dict[str, tuple[list[str], list[str]]] = {}
    for lineno, obj in iter_jsonl(alias_file, what, HOW_TO_GET["2wiki"]):
        where = "the alias entry"
        qid = _need(obj, "Q_id", str, alias_file, where, what, lineno)
        names = _str_list(_need(obj, "aliases", list, alias_file, where, what, lineno),
                          "aliases", alias_file, where, what, lineno)
        demonyms = _str_list(_need(obj, "demonyms", list, alias_file, where, what, lineno, default=[]),
                             "demonyms", alias_file, where, what, lineno)
        aliases[qid] = (names, demonyms)

    what = "2WikiMultihopQA's dev.json"
    records = []
    for i, rec in enumerate(_json_list(dev, what, HOW_TO_GET["2wiki"])):
        where = _where(i, rec.get("_id") if isinstance(rec, dict) else None)
        rid = _need(rec, "_id", str, dev, where, what)
        answer_id = _need(rec, "answer_id", (str, type(None)), dev, where, what, default=None)
        names, demonyms = aliases.get(answer_id, ([], [])) if answer_id else ([], [])
        supporting, titles = _supporting(rec, dev, where, what)
        records.append(QuestionRecord(
            id=rid, question=_need(rec, "question", str, dev, where, what).strip(),
            answers=[_need(rec, "answer", str, dev, where, what)], aliases=list(names),
            type=_need(rec, "type", str, dev, where, what), supporting=supporting, source=source,
            extra={"answer_id": answer_id, "demonyms": demonyms, "supporting_titles": titles,
                   "evidences": _need(rec, "evidences", list, dev, where, what, default=[])}))
    return records


def load_2wiki_train(path: str | Path, source: str = "2wiki-train") -> list[QuestionRecord]:
    """2WikiMultihopQA train.json (or the folder holding it with id_aliases.json): dev.json's format."""
    path = Path(path)
    return load_2wiki(path / "train.json" if path.is_dir() else path, source=source)
TWOWIKI_GOLDS = ("official", "with_demonyms")


def twowiki_golds(records: list[QuestionRecord], mode: str) -> list[QuestionRecord]:
    """2Wiki records with the golds of `evaluation.twowiki_golds`: "official" = answer + aliases
    (SeaKR's eval_multihop and DRAGIN's data.py read only `aliases` of id_aliases.json),
    "with_demonyms" = the demonyms count too (2Wiki's own evaluation). Other sets pass unchanged."""
    if mode not in TWOWIKI_GOLDS:
        raise UserError(f"unknown 2Wiki gold set {mode!r}", setting="evaluation.twowiki_golds",
                        fix=f"use one of {', '.join(TWOWIKI_GOLDS)}")
    if mode == "official":
        return records
    return [replace(r, aliases=list(dict.fromkeys([*r.aliases, *r.extra.get("demonyms", [])])))
            if "demonyms" in r.extra else r for r in records]


def load_hotpotqa(path: str | Path, source: str = "hotpotqa") -> list[QuestionRecord]:
    """HotpotQA distractor dev (hotpot_dev_distractor_v1.json, or DRAGIN's name for it,
    hotpotqa-dev.json; or the folder holding either)."""
    path = require_file(_resolve(path, "hotpot_dev_distractor_v1.json", "hotpotqa-dev.json"), "HotpotQA dev set",
                        HOW_TO_GET["hotpotqa"])
    what = "the HotpotQA distractor dev json"
    records = []
    for i, rec in enumerate(_json_list(path, what, HOW_TO_GET["hotpotqa"])):
        where = _where(i, rec.get("_id") if isinstance(rec, dict) else None)
        supporting, titles = _supporting(rec, path, where, what)
        records.append(QuestionRecord(
            id=_need(rec, "_id", str, path, where, what),
            question=_need(rec, "question", str, path, where, what).strip(),
            answers=[_need(rec, "answer", str, path, where, what)],
            type=_need(rec, "type", str, path, where, what), supporting=supporting, source=source,
            extra={"level": _need(rec, "level", str, path, where, what, default=""),
                   "supporting_titles": titles}))
    return records


def load_iirc(path: str | Path, source: str = "iirc") -> list[QuestionRecord]:
    """IIRC dev.json (or its folder, also as SeaKR's zip nests it in iirc_train_dev/): answerable
    questions only (answer type "none" is skipped)."""
    path = require_file(_resolve(path, "dev.json", "iirc_train_dev/dev.json"), "IIRC dev.json", HOW_TO_GET["iirc"])
    what = "IIRC's dev.json (a list of passages, each with its questions)"
    records = []
    for i, passage in enumerate(_json_list(path, what, HOW_TO_GET["iirc"])):
        pwhere = f"passage {i + 1}"
        title = _need(passage, "title", str, path, pwhere, what, default="")
        for j, q in enumerate(_need(passage, "questions", list, path, pwhere, what)):
            where = f"{pwhere}, question {j + 1}" + (
                f" (qid {q['qid']!r})" if isinstance(q, dict) and "qid" in q else "")
            ans = _need(q, "answer", dict, path, where, what)
            kind = _need(ans, "type", str, path, where + ", answer", what)
            if kind == "none":
                continue
            if kind == "span":
                spans = _need(ans, "answer_spans", list, path, where + ", answer", what)
                answers = [_need(s, "text", str, path, f"{where}, answer span {k + 1}", what).strip()
                           for k, s in enumerate(spans)]
            elif kind in ("value", "binary"):
                answers = [str(_need(ans, "answer_value", (str, int, float), path,
                                     where + ", answer", what))]
            else:
                raise UserError(f"{where}: unknown answer type {kind!r}", path=path,
                                fix="IIRC answer types are span, value, binary and none; "
                                    + _FIX.format(what=what))
            context = _need(q, "context", list, path, where, what, default=[])
            # Context passages are named by their linked article, "main" being the question's own.
            supporting = _unique(title if c.get("passage") == "main" else str(c.get("passage"))
                                 for c in context if isinstance(c, dict) and c.get("passage"))
            records.append(QuestionRecord(
                id=str(_need(q, "qid", (str, int), path, where, what)),
                question=_need(q, "question", str, path, where, what).strip(),
                answers=answers, type=kind, supporting=supporting, source=source,
                extra={"main_title": title, "answer_unit": ans.get("answer_unit"),
                       "question_links": q.get("question_links", [])}))
    return records


# ---------------------------------------------------------------- simple QA (DPR's files)

def _dpr_source(path: Path) -> str:
    name = path.name.lower()
    for prefix, source in (("nq", "nq"), ("trivia", "triviaqa"), ("squad", "squad")):
        if name.startswith(prefix):
            return source
    return name.split("-")[0].split(".")[0]


def load_dpr_qa(path: str | Path, source: str | None = None) -> list[QuestionRecord]:
    """NQ / TriviaQA / SQuAD as DPR distributes them: the `.qa.csv` question files
    (question<TAB>Python list literal of answers, no header) or the retriever JSON
    ({question, answers, positive_ctxs, ...}; optional "qid" and "type" keys are used)."""
    path = require_file(path, "DPR question file", HOW_TO_GET["dpr"])
    source = source or _dpr_source(path)
    stem = path.name.split(".")[0]
    if path.suffix == ".json":
        return _load_dpr_json(path, source, stem)
    records = []
    with open(path, encoding="utf-8", newline="") as fh:
        # csv with a tab delimiter, as DPR itself reads these files (quoted fields included).
        reader = csv.reader(fh, delimiter="\t")
        for row in reader:
            line = reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) < 2:
                raise UserError("the line has no tab-separated answer list", path=path, line=line,
                                fix="each line must be: question<TAB>['answer 1', 'answer 2']")
            try:
                answers = ast.literal_eval(row[1].strip())
            except (ValueError, SyntaxError) as e:
                raise UserError(f"the answer list {row[1][:60]!r} is not a Python list literal "
                                f"({type(e).__name__})", path=path, line=line,
                                fix="write the answers as ['answer 1', 'answer 2'] "
                                    "(quotes and brackets balanced)") from None
            if not isinstance(answers, (list, tuple)) or not answers:
                raise UserError(f"the answers column holds {_tname(answers)} {answers!r}, "
                                "not a non-empty list", path=path, line=line,
                                fix="write the answers as ['answer 1', 'answer 2']")
            records.append(QuestionRecord(
                id=f"{stem}-{len(records)}", question=row[0].strip(),
                answers=[str(a) for a in answers], type="single-hop", source=source,
                extra={"line": line}))
    return records


def _load_dpr_json(path: Path, source: str, stem: str) -> list[QuestionRecord]:
    what = "a DPR retriever JSON file (a list of {question, answers, positive_ctxs, ...})"
    records = []
    for i, rec in enumerate(_json_list(path, what, HOW_TO_GET["dpr"])):
        where = _where(i, rec.get("qid") if isinstance(rec, dict) else None)
        answers = _str_list(_need(rec, "answers", list, path, where, what), "answers", path, where, what)
        supporting = []
        for ctx in _need(rec, "positive_ctxs", list, path, where, what, default=[]):
            if not isinstance(ctx, dict):
                raise UserError(f"{where}: each positive context must be a JSON object", path=path,
                                fix=_FIX.format(what=what))
            pid = ctx.get("passage_id", ctx.get("id", ctx.get("title")))
            if pid is not None:
                supporting.append(str(pid))
        records.append(QuestionRecord(
            id=str(_need(rec, "qid", (str, int), path, where, what, default=f"{stem}-{i}")),
            question=_need(rec, "question", str, path, where, what).strip(), answers=answers,
            type=_need(rec, "type", str, path, where, what, default="single-hop"),
            supporting=_unique(supporting), source=source))
    return records


# ---------------------------------------------------------------- DPR retriever output (top passages)

_CHUNK = 1 << 20
_WS = " \t\r\n"


def iter_json_array(path: str | Path, what: str, how_to_get: str) -> Iterator[tuple[int, Any]]:
    """Yield (index, item) of a top-level JSON list without loading the whole file (DPR's
    retriever output for TriviaQA test is gigabytes). A syntax error names the item."""
    path = require_file(path, what, how_to_get)
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as fh:
        buf, pos = "", 0

        def fill() -> bool:
            nonlocal buf, pos
            more = fh.read(_CHUNK)
            if more:
                buf, pos = buf[pos:] + more, 0
            return bool(more)

        def next_char() -> str:   # the next non-blank character ("" at end of file), not consumed
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _WS:
                    pos += 1
                if pos < len(buf) or not fill():
                    return buf[pos] if pos < len(buf) else ""

        def bad(why: str, at: str) -> UserError:
            return UserError(f"{what} is not a well-formed JSON list ({at}): {why}", path=path,
                             fix=_FIX.format(what=what))

        if next_char() != "[":
            raise bad("the file does not start with '['", "at its start")
        pos += 1
        if next_char() == "]":
            return
        index = 0
        while True:
            next_char()
            while True:
                try:
                    item, end = decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as e:
                    if not fill():
                        raise bad(e.msg, f"in item {index + 1}, cut short or malformed") from None
            pos = end
            yield index, item
            index += 1
            sep = next_char()
            pos += 1
            if sep == "]":
                return
            if sep != ",":
                raise bad(f"expected ',' or ']', found {sep or 'the end of the file'!r}",
                          f"after item {index}")


def _ctx_passage(ctx: Any, where: str, path: Path, what: str) -> dict[str, str]:
    """One retrieved passage: DPR's {id, title, text, score, has_answer} or the SeaKR authors'
    packed {doc} (the string their script puts into the prompt)."""
    if not isinstance(ctx, dict):
        raise UserError(f"{where}: each of 'ctxs' must be a JSON object", path=path,
                        fix=_FIX.format(what=what))
    key = "text" if "text" in ctx else "doc"
    text = _need(ctx, key, str, path, where, what)
    pid = ctx.get("id", ctx.get("passage_id"))
    title = ctx.get("title")
    return {"id": "" if pid is None else str(pid), "title": title if isinstance(title, str) else "",
            "text": text}


def _top_records(path: Path, what: str) -> Iterable[tuple[int, Any]]:
    """The records of a list file, streamed; a pandas column-oriented file ({"question": {"0": ..},
    "ctxs": {"0": ..}}, what DataFrame.to_json writes) is read whole and turned into records."""
    path = require_file(path, what, HOW_TO_GET["top10"])
    with open(path, encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
    if not head.startswith("{"):
        return iter_json_array(path, what, HOW_TO_GET["top10"])
    columns = read_json(path, what, HOW_TO_GET["top10"])
    rows = [_need(columns, k, dict, path, "the top-level object", what) for k in ("question", "ctxs")]
    keys = sorted(rows[0], key=lambda k: int(k) if str(k).isdigit() else str(k))
    return enumerate({"question": rows[0][k], "ctxs": rows[1].get(k, [])} for k in keys)


def iter_top_questions(path: str | Path) -> Iterator[str]:
    """The questions of a top-passages file, in file order (its passages are not kept)."""
    what = "a DPR retriever-output file (a JSON list of {question, answers, ctxs})"
    for i, rec in _top_records(Path(path), what):
        yield _need(rec, "question", str, Path(path), _where(i), what).strip()


def load_dpr_top_passages(path: str | Path, top: int = 10) -> dict[str, list[dict[str, str]]]:
    """question -> its first `top` retrieved passages ({id, title, text}), from DPR's retriever
    output (a JSON list of {question, answers, ctxs: [...]}, streamed) or the SeaKR authors'
    packed <set>_top10.json. The prompt gets `text`: DPR's passage body, or the packed `doc`."""
    what = "a DPR retriever-output file (a JSON list of {question, answers, ctxs})"
    out: dict[str, list[dict[str, str]]] = {}
    for i, rec in _top_records(Path(path), what):
        where = _where(i)
        question = _need(rec, "question", str, Path(path), where, what).strip()
        ctxs = _need(rec, "ctxs", list, Path(path), where, what)
        passages = [_ctx_passage(c, f"{where}, ctxs[{j}]", Path(path), what)
                    for j, c in enumerate(ctxs[:top])]
        for j, p in enumerate(passages):
            p["id"] = p["id"] or f"q{i}-{j}"   # the packed files carry no passage ids
        out.setdefault(question, passages)      # a repeated question has the same retrieval
    return out


def load_self_rag_input(path: str | Path, setting: str = "self_rag.input_files") -> dict[str, list[dict[str, str]]]:
    """question -> its passages ({id, title, text}, in file order), from an input file of
    Self-RAG's run_short_form.py: a JSON list when the name ends in .json, else JSON lines (as
    the script decides), each record {question, ctxs: [{title, text, ...}, ...]} (`top_contexts`
    when it has no `ctxs`, as the script falls back). Every question must have passages, each
    with a title and a text (the script formats both into its prompt); errors name the file, the
    line (the record of a .json list) and `setting`."""
    what = "a Self-RAG input file ({question, ctxs: [{title, text}, ...]} per question)"
    path = Path(path)
    if not path.is_file():
        raise DataMissingError(f"the Self-RAG input file {path} was not found", path=path,
                               setting=setting, fix=HOW_TO_GET["self-rag-input"])
    fix_ctxs = ("give every question its retrieved passages as \"ctxs\": [{\"title\": ..., \"text\": "
                "...}, ...] (run_short_form.py reads them there), or set self_rag.passages: index")
    if path.suffix == ".json":
        records = ((None, f"record {i + 1}", rec)
                   for i, rec in iter_json_array(path, what, HOW_TO_GET["self-rag-input"]))
    else:
        records = ((line, "the record", rec)
                   for line, rec in iter_jsonl(path, what, HOW_TO_GET["self-rag-input"]))
    out: dict[str, list[dict[str, str]]] = {}
    for n, (line, where, rec) in enumerate(records):
        question = _need(rec, "question", str, path, where, what, line).strip()
        key = "ctxs" if "ctxs" in rec else "top_contexts"
        ctxs = rec.get(key)
        if not isinstance(ctxs, list) or not ctxs:
            state = "missing" if ctxs is None else "empty" if ctxs == [] else _tname(ctxs)
            raise UserError(f"{where} (question {question[:60]!r}) has no passages: 'ctxs' is {state}",
                            path=path, line=line, setting=setting, fix=fix_ctxs)
        passages = []
        for j, ctx in enumerate(ctxs):
            at = f"{where}, {key}[{j}]"
            title = _need(ctx, "title", str, path, at, what, line)
            text = _need(ctx, "text", str, path, at, what, line)
            pid = ctx.get("id")
            passages.append({"id": f"q{n}-{j}" if pid is None else str(pid), "title": title, "text": text})
        out.setdefault(question, passages)     # a repeated question: the first record's passages
    return out


# ---------------------------------------------------------------- FanOutQA (shipped in its wheel)

def fanoutqa_path(split: str = "dev") -> Path:
    """The data file inside the installed fanoutqa package, found without importing it."""
    if split != "dev":
        raise UserError(f"FanOutQA split {split!r} is not available with gold answers",
                        setting="split", fix="use split='dev' (the test split's answers are held out)")
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or not spec.submodule_search_locations:
        raise DataMissingError("the fanoutqa package is not installed", fix=HOW_TO_GET["fanoutqa"])
    return Path(list(spec.submodule_search_locations)[0]) / "data" / f"fanout-final-{split}.json"


def render_answer(answer: Any) -> str:
    """A gold answer as one string, as fanoutqa.eval.utils.str_answer renders it."""
    if isinstance(answer, list):
        return "\n".join(render_answer(a) for a in answer)
    if isinstance(answer, dict):
        return "\n".join(f"{k} - {render_answer(v)}" for k, v in answer.items())
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    return "" if answer is None else str(answer)


def answer_leaves(answer: Any) -> list[str]:
    """The strings FanOutQA's loose accuracy looks for: list items, dict keys and values."""
    if isinstance(answer, list):
        return [s for a in answer for s in answer_leaves(a)]
    if isinstance(answer, dict):
        return [s for a in (*answer.keys(), *answer.values()) for s in answer_leaves(a)]
    return [render_answer(answer)]


def load_fanoutqa(split: str = "dev", level: str = "top", path: str | Path | None = None,
                  source: str | None = None) -> list[QuestionRecord]:
    """FanOutQA's dev set. level="top": the multi-hop questions; level="sub": every node of every
    decomposition tree, depth first. A sub-question is `single_value` when it is a leaf (answered
    from one Wikipedia page) whose answer is one string, number or boolean."""
    if level not in ("top", "sub"):
        raise UserError(f"FanOutQA level {level!r} is unknown", setting="level",
                        fix="use level='top' or level='sub'")
    path = require_file(Path(path) if path else fanoutqa_path(split), "FanOutQA dev set",
                        HOW_TO_GET["fanoutqa"])
    what = "FanOutQA's fanout-final-dev.json"
    records: list[QuestionRecord] = []

    def leaf_titles(node: dict, where: str) -> list[str]:
        children = _need(node, "decomposition", list, path, where, what, default=[])
        if not children:
            ev = _need(node, "evidence", (dict, type(None)), path, where, what, default=None)
            return [ev["title"]] if ev and isinstance(ev.get("title"), str) else []
        return _unique(t for k, c in enumerate(children) for t in leaf_titles(c, f"{where}.{k + 1}"))

    def visit(node: dict, top_id: str, where: str, depth: int) -> None:
        sub_id = _need(node, "id", str, path, where, what)
        answer = _need(node, "answer", (str, int, float, bool, list, dict, type(None)), path, where, what)
        children = _need(node, "decomposition", list, path, where, what, default=[])
        rendered = render_answer(answer)
        records.append(QuestionRecord(
            id=f"{top_id}-{sub_id}",  # sub-question ids recur across trees ("capital of China?")
            question=_need(node, "question", str, path, where, what).strip(),
            answers=[rendered] if rendered else [], type="fanoutqa-sub",
            supporting=leaf_titles(node, where), source=source or "fanoutqa-sub",
            extra={"parent_id": top_id, "sub_id": sub_id, "depth": depth,
                   "depends_on": node.get("depends_on", []), "evidence": node.get("evidence"),
                   "single_value": not children and isinstance(answer, (str, int, float, bool)),
                   "answer": answer, "answer_leaves": answer_leaves(answer)}))
        for k, child in enumerate(children):
            visit(child, top_id, f"{where}.{k + 1}", depth + 1)

    for i, top in enumerate(_json_list(path, what, HOW_TO_GET["fanoutqa"])):
        where = _where(i, top.get("id") if isinstance(top, dict) else None)
        top_id = _need(top, "id", str, path, where, what)
        if level == "sub":
            for k, node in enumerate(_need(top, "decomposition", list, path, where, what)):
                visit(node, top_id, f"{where}, sub-question {k + 1}", 1)
            continue
        answer = _need(top, "answer", (str, int, float, bool, list, dict), path, where, what)
        records.append(QuestionRecord(
            id=top_id, question=_need(top, "question", str, path, where, what).strip(),
            answers=[render_answer(answer)], type="fanoutqa", supporting=leaf_titles(top, where),
            source=source or "fanoutqa",
            extra={"categories": top.get("categories", []), "answer": answer,
                   "answer_leaves": answer_leaves(answer)}))
    return records
