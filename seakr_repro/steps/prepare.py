"""Step 00/01 logic: the profile's corpus, question sets and their statistics (paper Table 6)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..core.config import Config
from ..core.errors import DataMissingError, UserError
from ..core.io import write_jsonl
from ..core.paths import results_dir, setting_path
from ..runs.inputs import corpus_path, load_prepared, profile_datasets, top10_file, with_text_field

if TYPE_CHECKING:
    import pandas


def ensure_corpus(cfg: Config, progress: bool = True, rebuild: bool = False) -> Path:
    """Build the profile's corpus JSONL once (later calls reuse it)."""
    from ..data import corpus

    out = corpus_path(cfg)
    if out.is_file() and not rebuild:
        return out
    name = cfg["corpus.name"]
    fields = corpus.WITH_TEXT_FIELDS if with_text_field(cfg) else corpus.STORED_FIELDS
    if name == "wiki-excerpt":
        corpus.build_wiki_excerpt_corpus(out, cfg["corpus.words_per_passage"], progress=progress,
                                         fields=fields)
    elif name == "dpr-wiki":
        tsv = setting_path(cfg["corpus.tsv_path"])
        corpus.convert_dpr_tsv(tsv, out, progress=progress, fields=fields)
    else:
        raise UserError(f"unknown corpus '{name}'", setting="corpus.name",
                        fix="use wiki-excerpt or dpr-wiki")
    return out


def missing_inputs(cfg: Config | None, names) -> list[str]:
    """Each missing data set, and each missing top-10 file the profile reads, with where to get it."""
    from ..data.loaders import HOW_TO_GET
    from ..data.registry import dataset_available, describe_missing

    out = [f"data set {n}: {describe_missing(n)}" for n in names if not dataset_available(n)]
    for name in names if cfg is not None else ():
        top = top10_file(cfg, name)
        if top is not None and not top.is_file():
            out.append(f"top-10 passages of {name} (seakr.simple_qa_passages: official, whose questions "
                       f"simple QA evaluates): not found at {top}. To get them: {HOW_TO_GET['top10']}")
    return out


def prepare_datasets(cfg: Config, names=None) -> dict:
    """Load each data set of the profile (sampled per datasets.n_questions) and save it as JSONL. A
    simple-QA set read with its official top-10 passages takes its questions from that file, as
    main_simpleqa.py does (`registry.top10_questions`); where they came from and how many of the
    file's questions the dev file lacks is saved beside it (<name>.source.json, `source_notes`)."""
    from ..core.io import write_json
    from ..data.loaders import twowiki_golds
    from ..data.records import sample
    from ..data.registry import load_dataset, top10_questions

    names = list(names or profile_datasets(cfg))
    missing = missing_inputs(cfg, names)      # every missing input in one error
    if missing:
        raise DataMissingError("these inputs are not on disk: " + "; ".join(missing),
                               fix="download them as described, or use PROFILE=default, which needs no download")
    out_dir = results_dir(cfg.profile) / "data"
    n, seed = cfg["datasets.n_questions"], cfg["datasets.sample_seed"]
    loaded = {}
    for name in names:
        top = top10_file(cfg, name)
        note_path = out_dir / f"{name}.source.json"
        if top is None:
            records = load_dataset(name, n=n, seed=seed)
            note_path.unlink(missing_ok=True)
        else:
            records, note = top10_questions(name, top)
            records = sample(records, n, seed)
            write_json(note_path, note)
            if note["unmatched"]:
                print(f"[prepare] {name}: {note['unmatched']} of the {note['in_file']} questions of {top} "
                      f"are not in {note['golds_from']} (no golds): not evaluated", flush=True)
        records = twowiki_golds(records, cfg["evaluation.twowiki_golds"])
        write_jsonl(out_dir / f"{name}.jsonl", (r.to_dict() for r in records))
        loaded[name] = records
    return loaded


def source_notes(cfg: Config) -> dict[str, dict]:
    """Per prepared set read from a top-10 file: where its questions came from and the counts."""
    from ..core.io import read_json

    out = {}
    for name in profile_datasets(cfg):
        path = results_dir(cfg.profile) / "data" / f"{name}.source.json"
        if path.is_file():
            out[name] = read_json(path)
    return out


def dataset_statistics(loaded: dict, notes: dict | None = None) -> "pandas.DataFrame":
    """Per data set: size (ours and the paper's Table 6), kind, question/answer lengths, types;
    with `notes` (`source_notes`), the top-10 file's questions the dev file lacks."""
    import pandas as pd
    from collections import Counter
    from ..data.registry import DATASETS

    rows = []
    for name, records in loaded.items():
        spec = DATASETS[name]
        types = Counter(r.type for r in records)
        per = max(len(records), 1)        # a mean over no records: 0
        rows.append({"dataset": name, "kind": spec.kind, "questions": len(records), "paper_questions": spec.paper_size,
                     "mean_question_words": round(sum(len(r.question.split()) for r in records) / per, 1),
                     "mean_answer_words": round(sum(len(r.answers[0].split()) for r in records if r.answers) / per, 1),
                     "with_aliases": sum(bool(r.aliases) for r in records),
                     "types": ", ".join(f"{t} {n}" for t, n in types.most_common())})
        if notes:
            rows[-1]["unmatched_questions"] = notes[name]["unmatched"] if name in notes else None
    return pd.DataFrame(rows)


def ensure_index(cfg: Config, progress: bool = True, force: bool = False) -> dict:
    """Build the profile's BM25 index when missing or stale; return its metadata."""
    from ..retrieval.index import build_index, index_dir_for, index_is_current, read_meta

    corpus_file = ensure_corpus(cfg, progress=progress)
    backend, scheme = cfg["retrieval.backend"], cfg["retrieval.scheme"]
    index_dir = index_dir_for(cfg["corpus.name"], backend, scheme)
    # the profile's k1 and b: bm25s bakes them into its index (an index built with the scheme's
    # defaults would be refused when a profile with others opens it); Lucene only records them
    k1, b = cfg.get("retrieval.k1"), cfg.get("retrieval.b")
    if force or not index_is_current(corpus_file, index_dir, backend, k1=k1, b=b, scheme=scheme):
        build_index(corpus_file, index_dir, backend=backend, progress=progress, scheme=scheme, k1=k1, b=b)
    return read_meta(index_dir)


def supporting_recall(cfg: Config, searcher, ks=(1, 3, 10)) -> "pandas.DataFrame":
    """Share of questions with a supporting passage in BM25's top k (question as the query); only data
    sets whose `supporting` entries are corpus passage ids take part."""
    import pandas as pd

    rows = []
    kmax = max(ks)
    for name in profile_datasets(cfg):
        records = [r for r in load_prepared(cfg, name) if r.supporting]
        if not records or searcher.doc(records[0].supporting[0]) is None:
            continue  # supporting facts are titles, not passage ids of this corpus
        ranked = searcher.batch_search([r.question for r in records], k=kmax)
        row = {"dataset": name, "questions": len(records)}
        for k in ks:
            found = [bool(set(r.supporting) & {h.id for h in hits[:k]}) for r, hits in zip(records, ranked)]
            row[f"recall@{k}"] = round(100 * sum(found) / len(found), 1)
            row[f"all@{k}"] = round(100 * sum(set(r.supporting) <= {h.id for h in hits[:k]}
                                              for r, hits in zip(records, ranked)) / len(records), 1)
        rows.append(row)
    return pd.DataFrame(rows)
