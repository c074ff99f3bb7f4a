"""The published numbers (SeaKR Tables 1-4, 6, 7; SKR; TAIKC) as tidy tables under data/paper/.

Each CSV has the columns table, model, setting, method, label, dataset, metric, value, note:
one row per printed number, ids in lower case (methods: seakr, dragin, ...; datasets: 2wiki,
hotpotqa, iirc, nq, triviaqa, squad; metrics: em, f1, acc, avg, n_questions,
seconds_per_question), `label` as printed, scores in percent. An empty value needs a note saying
why (e.g. the paper prints '/'). data/paper/README.md gives the sources."""
from __future__ import annotations

import csv
import math
import re
from functools import lru_cache
from pathlib import Path

import pandas as pd

from ..core.errors import DataMissingError, UserError
from ..core.paths import PAPER_DIR

COLUMNS = ("table", "model", "setting", "method", "label", "dataset", "metric", "value", "note")
REQUIRED = ("table", "method", "dataset", "metric", "value", "note")

# Spellings found in the papers and in user code, mapped to the ids the CSVs use.
ALIASES = {
    "twowiki": "2wiki", "2wikimultihopqa": "2wiki", "2wikimultihop": "2wiki", "hpqa": "hotpotqa",
    "naturalquestions": "nq", "tq": "triviaqa", "sq": "squad",
    "ircot": "ircot", "selfrag": "self-rag",
    "exactmatch": "em", "wallseconds": "seconds_per_question",
}


def canonical(name: str | None) -> str:
    """Lower-case id for a method, data set or metric name ("IR-CoT" -> "ircot", "TwoWiki" -> "2wiki")."""
    text = str(name or "").strip().lower()
    return ALIASES.get(re.sub(r"[^a-z0-9]", "", text), re.sub(r"[\s_]+", "-", text))


def available_tables(directory: str | Path | None = None) -> list[str]:
    """Names accepted by `load_paper_table`, e.g. ['seakr_table1', ..., 'taikc_table2']."""
    return sorted(p.stem for p in Path(directory or PAPER_DIR).glob("*.csv"))


def _parse_value(raw: str, note: str, path: Path, line: int) -> float:
    raw = raw.strip()
    if raw == "":
        if not note.strip():
            raise UserError("an empty value needs a note saying why it is missing",
                            fix="fill in the number or explain its absence in the note column",
                            path=path, line=line)
        return math.nan
    try:
        return float(raw.replace(",", ""))
    except ValueError:
        raise UserError(f"value '{raw}' is not a number", fix="write the number as printed, e.g. 36.0",
                        path=path, line=line) from None


def _read(path: Path) -> pd.DataFrame:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise UserError("paper table is empty", fix="restore it from git", path=path)
        header = [h.strip() for h in header]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise UserError(f"paper table lacks the column(s) {', '.join(missing)}",
                            fix=f"the header must name {', '.join(COLUMNS)}", path=path, line=1)
        rows = []
        for line_no, fields in enumerate(reader, 2):
            if not any(f.strip() for f in fields):
                continue
            if len(fields) != len(header):
                raise UserError(f"row has {len(fields)} fields but the header has {len(header)}",
                                fix="quote fields that contain commas", path=path, line=line_no)
            row = dict(zip(header, (f.strip() for f in fields)))
            row["value"] = _parse_value(row["value"], row["note"], path, line_no)
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(dict.fromkeys([*COLUMNS, *header])))
    df["table"] = df["table"].astype(str)
    df[[c for c in COLUMNS if c != "value"]] = df[[c for c in COLUMNS if c != "value"]].fillna("")
    df["value"] = df["value"].astype(float)
    return df


@lru_cache(maxsize=None)
def _load_cached(path: str, mtime: float) -> pd.DataFrame:
    return _read(Path(path))


def load_paper_table(name: str, directory: str | Path | None = None) -> pd.DataFrame:
    """The tidy table `name` (a stem like 'seakr_table1', or a file path); missing values are NaN."""
    path = Path(name)
    if path.suffix != ".csv":
        path = Path(directory or PAPER_DIR) / f"{name}.csv"
    if not path.is_file():
        raise DataMissingError(f"paper table '{name}' was not found",
                               fix="use one of: " + (", ".join(available_tables(directory)) or "(none)"),
                               path=path)
    return _load_cached(str(path.resolve()), path.stat().st_mtime).copy()


def paper_value(table: str, method: str, dataset: str, metric: str, model: str | None = None,
                directory: str | Path | None = None) -> float | None:
    """One published number, or None when the paper has none (not printed, or '/'). Names match
    through `canonical`; `model` picks the row where a table lists several backbones (SeaKR Table
    4, SKR, TAIKC) and must be given there when it is ambiguous."""
    df = load_paper_table(table, directory)
    hit = df[(df["method"].map(canonical) == canonical(method))
             & (df["dataset"].map(canonical) == canonical(dataset))
             & (df["metric"].map(canonical) == canonical(metric))]
    if model is not None:
        hit = hit[hit["model"].map(canonical) == canonical(model)]
    if len(hit) > 1:
        raise UserError(f"{table} has {len(hit)} values for {method}/{dataset}/{metric}",
                        fix="pass model= to choose one of: " + ", ".join(sorted(set(hit["model"]))))
    if hit.empty or math.isnan(hit["value"].iloc[0]):
        return None
    return float(hit["value"].iloc[0])
