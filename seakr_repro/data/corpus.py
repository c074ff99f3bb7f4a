"""Corpora as pyserini JSONL: one passage per line, {"id", "title", "contents"}.

`contents` is "title\\ntext" so BM25 searches title + text (as the original multi_match did). The
text is stored once: the file holds no separate "text" field (it would double DPR's 21M passages
on disk and be indexed a second time); readers split `contents` at its first newline.
Two sources:
- the embedded default: the real English Wikipedia excerpt that ships inside gensim 4.4.0,
  cleaned with gensim's `filter_wiki` and split into ~100-word passages (DPR's recipe);
- DPR's psgs_w100.tsv (21,015,324 passages of December 2018), converted by streaming."""
from __future__ import annotations

import bz2
import csv
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Iterator, Sequence

from ..core.errors import DataMissingError, UserError
from ..core.io import atomic_open, iter_jsonl, require_file

GENSIM_WIKI_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
DPR_TSV_HELP = ("download DPR's Wikipedia passages (psgs_w100.tsv.gz, 13 GB unpacked) from the DPR "
                "repository's data download script (`python data/download_data.py --resource "
                "data.wikipedia_split.psgs_w100`), gunzip it and put it at data/raw/psgs_w100.tsv "
                "or pass its path with --tsv")
DPR_HEADER = ["id", "text", "title"]

# Markup that filter_wiki leaves behind.
_BOLD_ITALIC = re.compile(r"'{2,}")
_HEADING = re.compile(r"^\s*=+\s*(.*?)\s*=+\s*$", re.M)
_EMPTY_PARENS = re.compile(r"\(\s*[;,\s]*\)")
_LEADING_PUNCT_IN_PARENS = re.compile(r"\(\s*[;,]\s*")
_SPACES = re.compile(r"[ \t\u00a0\u2009\u200b]+")
_FILE_LINE = re.compile(r"^(thumb|left|right|upright|\d+px)\|.*$", re.M | re.I)


def gensim_wiki_path() -> Path:
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise DataMissingError("gensim is not installed, so the default Wikipedia excerpt is missing",
                               fix="run `make setup` (or `pip install gensim==4.4.0`)")
    path = Path(spec.submodule_search_locations[0]) / GENSIM_WIKI_FILE
    return require_file(path, "gensim's Wikipedia excerpt", "reinstall gensim==4.4.0")


def clean_wikitext(text: str) -> str:
    """Plain text from an article's wikitext: gensim's filter_wiki plus a little tidying."""
    from gensim.corpora.wikicorpus import filter_wiki

    text = filter_wiki(text)
    text = _HEADING.sub(r"\1.", text)           # keep section titles as short sentences
    text = _FILE_LINE.sub("", text)
    text = _BOLD_ITALIC.sub("", text)
    text = _EMPTY_PARENS.sub("", text)
    text = _LEADING_PUNCT_IN_PARENS.sub("(", text)
    text = _SPACES.sub(" ", text)
    return re.sub(r" +([,.;:])", r"\1", text)


def split_passages(text: str, words_per_passage: int = 100) -> list[str]:
    """DPR's split: consecutive blocks of `words_per_passage` whitespace tokens."""
    words = text.split()
    return [" ".join(words[i:i + words_per_passage]) for i in range(0, len(words), words_per_passage)]


def iter_wiki_excerpt(words_per_passage: int = 100, min_words: int = 20) -> Iterator[dict]:
    """Passages of gensim's Wikipedia excerpt, in file order. Ids are "<pageid>_<chunk>"."""
    from gensim.corpora.wikicorpus import extract_pages

    with bz2.BZ2File(gensim_wiki_path()) as fh:
        for title, text, pageid in extract_pages(fh, filter_namespaces=("0",)):
            if text.lstrip().lower().startswith("#redirect") or ":" in title.split(" ")[0]:
                continue
            for i, passage in enumerate(split_passages(clean_wikitext(text), words_per_passage)):
                if len(passage.split()) < min_words and i > 0:
                    continue  # a short tail adds noise, not knowledge
                yield make_passage(f"{pageid}_{i}", title, passage)


STORED_FIELDS = ("id", "title", "contents")     # what a corpus line holds (text = contents' tail)


def passage_text(obj: dict) -> str:
    """A corpus line's text: its "text" field (older files) or `contents` after the title line."""
    return obj["text"] if "text" in obj else obj.get("contents", "").partition("\n")[2]


def make_passage(pid: str, title: str, text: str) -> dict:
    return {"id": str(pid), "title": title, "text": text, "contents": f"{title}\n{text}"}


# the two-field BM25 of the paper profile (retrieval.scheme: es_best_fields) indexes title and text
# as fields of their own, and Anserini reads each from its own JSON key: those corpora keep "text"
WITH_TEXT_FIELDS = STORED_FIELDS + ("text",)


def write_corpus(passages, out_path: str | Path, progress: bool = True, total: int | None = None,
                 fields: Sequence[str] = STORED_FIELDS) -> int:
    """Write passages (their `fields`) as JSONL atomically; refuse an empty corpus."""
    from ..core.progress import tqdm

    n = 0
    with atomic_open(out_path) as fh:
        for p in tqdm(passages, total=total, desc=f"writing {Path(out_path).name}",
                      unit="psg", disable=not progress, mininterval=2.0):
            fh.write(json.dumps({k: p[k] for k in fields}, ensure_ascii=False) + "\n")
            n += 1
        if n == 0:
            raise UserError("the corpus is empty: no passage was produced", path=out_path,
                            fix="check the input file; it must contain passages")
    return n


def build_wiki_excerpt_corpus(out_path: str | Path, words_per_passage: int = 100,
                              progress: bool = True, fields: Sequence[str] = STORED_FIELDS) -> int:
    return write_corpus(iter_wiki_excerpt(words_per_passage), out_path, progress=progress,
                        fields=fields)


def iter_dpr_tsv(tsv_path: str | Path, progress: bool = True) -> Iterator[dict]:
    """Stream DPR's psgs_w100.tsv (id, text, title) in constant memory, checking every line."""
    from ..core.progress import tqdm

    tsv_path = require_file(tsv_path, "DPR passages TSV (psgs_w100.tsv)", DPR_TSV_HELP)
    csv.field_size_limit(sys.maxsize)
    size = os.path.getsize(tsv_path)
    with open(tsv_path, encoding="utf-8", newline="") as fh, \
            tqdm(total=size, unit="B", unit_scale=True, desc=f"reading {tsv_path.name}",
                 disable=not progress, mininterval=2.0) as bar:
        header = fh.readline()
        bar.update(len(header.encode("utf-8")))
        cols = header.rstrip("\r\n").split("\t")
        if cols != DPR_HEADER:
            raise UserError(f"the header is {cols!r}, expected {DPR_HEADER!r}", path=tsv_path, line=1,
                            fix="use DPR's psgs_w100.tsv unchanged (tab-separated id, text, title)")
        for lineno, line in enumerate(fh, 2):
            bar.update(len(line.encode("utf-8")))
            if not line.strip():
                continue
            row = next(csv.reader([line], delimiter="\t"))
            if len(row) != 3 or not row[0].strip():
                raise UserError(f"expected 3 tab-separated columns (id, text, title), found {len(row)}",
                                path=tsv_path, line=lineno,
                                fix="repair or delete that line; the file may be truncated or edited")
            pid, text, title = row
            yield make_passage(pid.strip(), title, text)


def convert_dpr_tsv(tsv_path: str | Path, out_path: str | Path, progress: bool = True,
                    fields: Sequence[str] = STORED_FIELDS) -> int:
    """psgs_w100.tsv -> pyserini JSONL, streaming; nothing is left half-written on error."""
    from ..core.disk import require_free_space

    tsv = require_file(tsv_path, "DPR passages TSV (psgs_w100.tsv)", DPR_TSV_HELP)
    # each line gains its JSON keys and a second copy of its title (~10%, an estimate): ask 1.25x
    factor = 2.25 if "text" in fields else 1.25       # a second copy of the text with "text"
    require_free_space(out_path, int(tsv.stat().st_size * factor), "the corpus JSONL")
    return write_corpus(iter_dpr_tsv(tsv_path, progress), out_path, progress=False, fields=fields)


def load_corpus(path: str | Path) -> dict[str, dict]:
    """All passages of a (small) JSONL corpus by id. For DPR's 21M use the index's doc lookup."""
    passages = {}
    for lineno, obj in iter_jsonl(path, "corpus JSONL", "build it with `python -m seakr_repro corpus`"):
        missing = {"id", "contents"} - obj.keys()
        if missing:
            raise UserError(f"corpus line lacks {sorted(missing)}", path=path, line=lineno,
                            fix="each line needs id and contents (rebuild the corpus)")
        obj.setdefault("text", passage_text(obj))
        passages[str(obj["id"])] = obj
    if not passages:
        raise UserError("the corpus is empty", path=path, fix="rebuild it")
    return passages


def corpus_summary(path: str | Path, progress: bool = False) -> dict:
    """Passage count, articles, words per passage: streamed, so it works for DPR's 21M too."""
    from ..core.progress import tqdm

    n = words = 0
    titles: set[str] = set()
    for _, obj in tqdm(iter_jsonl(path, "corpus JSONL"), desc="summarising corpus", unit="psg",
                       disable=not progress, mininterval=2.0):
        n += 1
        words += len(passage_text(obj).split())
        if len(titles) < 5_000_000:
            titles.add(obj.get("title", ""))
    if n == 0:
        raise UserError("the corpus is empty", path=path, fix="rebuild it")
    from ..core.paths import repo_relative

    return {"path": repo_relative(path), "passages": n, "articles": len(titles),
            "mean_words_per_passage": round(words / n, 1)}
