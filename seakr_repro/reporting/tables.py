"""Tables side by side with the paper: one wide frame, rendered to Markdown and LaTeX (booktabs).

`side_by_side` joins our tidy results with a tidy paper table (see paper_numbers) on
(row, dataset, metric), all names compared through `canonical`. Each cell reads
"ours | paper | delta" with delta = ours - paper; a missing number is "–". Rows that are empty for
a stated reason (say, "Self-RAG: checkpoint not supplied") keep that reason in
`df.attrs["footnotes"]`, which both renderers print under the table."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from ..core.errors import UserError
from ..core.io import atomic_open
from ..core.paths import TABLES_DIR
from .paper_numbers import canonical

MISSING = "–"
SEP = " | "
DATASET_NAMES = {"2wiki": "2Wiki", "hotpotqa": "HotpotQA", "iirc": "IIRC", "nq": "NQ",
                 "triviaqa": "TriviaQA", "squad": "SQuAD", "musique": "MuSiQue",
                 "bamboogle": "Bamboogle"}
METRIC_NAMES = {"em": "EM", "f1": "F1", "acc": "Acc", "avg": "Avg", "n-questions": "#Questions",
                "seconds-per-question": "s/question"}
DECIMALS = {"seconds-per-question": 2, "n-questions": 0}  # as printed; everything else 1
CELL_LEGEND = "Each cell: ours | paper | delta (ours minus paper); – = no number."


def _fmt(x: float | None, decimals: int, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    return f"{x:+.{decimals}f}" if sign else f"{x:.{decimals}f}"


def _keyed(df: pd.DataFrame, rows: str, who: str, needed: Sequence[str]) -> pd.DataFrame:
    missing = [c for c in (rows, "dataset", "metric", *needed) if c not in df.columns]
    if missing:
        raise UserError(f"{who} table lacks the column(s) {', '.join(missing)}",
                        fix=f"pass a tidy frame with columns {rows}, dataset, metric, value")
    out = df.copy()
    for key, column in (("_row", rows), ("_ds", "dataset"), ("_m", "metric")):
        out[key] = out[column].map(canonical)
    dup = out.duplicated(["_row", "_ds", "_m"])
    if dup.any():
        first = out[dup].iloc[0]
        raise UserError(f"{who} table has several values for {first[rows]}/{first['dataset']}/"
                        f"{first['metric']}", fix="filter it to one model and setting first")
    return out


def side_by_side(ours: pd.DataFrame, paper: pd.DataFrame, rows: str = "method",
                 decimals: int | None = None,
                 show_ci: bool = False, reasons: Mapping[str, str] | None = None,
                 order: Sequence[str] | None = None,
                 partial: Mapping[str, str] | None = None,
                 notes: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Wide table: one row per `rows` value, columns (dataset, metric), cells "ours | paper | delta".
    `ours` is tidy (rows, dataset, metric, value[, low, high]) in the paper's units (percent); with
    `show_ci` the interval follows our value. `decimals` None prints each metric as the paper does
    (`DECIMALS`, else 1). `reasons`: row -> why it has no numbers of ours; `order`: the row order
    (default: the paper's, then ours); `partial`: row -> a note such as "partial: 40 of 1,200
    questions" (the row is labelled "(partial)", the note is its footnote); `notes`: row -> a
    footnote on how its numbers compare (only for rows the table has). Row labels come from the
    paper's `label` column, else ours, else the id."""
    o = _keyed(ours, rows, "our", ["value"])
    p = _keyed(paper, rows, "paper", ["value"])
    reasons, partial, notes = ({canonical(k): v for k, v in (by_row or {}).items()}
                               for by_row in (reasons, partial, notes))
    row_ids = list(dict.fromkeys([*(canonical(r) for r in order or []), *p["_row"], *o["_row"], *reasons]))
    cols = list(dict.fromkeys(zip(pd.concat([p["_ds"], o["_ds"]]), pd.concat([p["_m"], o["_m"]]))))
    labels = {}
    for frame in (o, p):  # the paper's label wins: it is what readers compare against
        src = frame["label"] if "label" in frame.columns else frame[rows]
        labels.update({r: str(lab) for r, lab in zip(frame["_row"], src) if str(lab).strip()})
    ours_at = o.set_index(["_row", "_ds", "_m"])
    paper_at = p.set_index(["_row", "_ds", "_m"])["value"]
    table = {}
    for ds, m in cols:
        places = DECIMALS.get(m, 1) if decimals is None else decimals
        column = []
        for r in row_ids:
            ov = float(ours_at["value"].get((r, ds, m), math.nan))
            pv = float(paper_at.get((r, ds, m), math.nan))
            cell = _fmt(ov, places)
            if show_ci and not math.isnan(ov) and {"low", "high"} <= set(ours_at.columns):
                lo, hi = ours_at.loc[(r, ds, m), "low"], ours_at.loc[(r, ds, m), "high"]
                if not (pd.isna(lo) or pd.isna(hi)):
                    cell += f" [{lo:.{places}f}, {hi:.{places}f}]"
            column.append(SEP.join([cell, _fmt(pv, places), _fmt(ov - pv, places, sign=True)]))
        table[(DATASET_NAMES.get(ds, ds), METRIC_NAMES.get(m, m.upper() if len(m) <= 3 else m))] = column
    shown = {r: labels.get(r, r) + (" (partial)" if r in partial else "") for r in row_ids}
    index = pd.Index([shown[r] for r in row_ids], name=rows)
    out = pd.DataFrame(table, index=index)
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=["dataset", "metric"])
    foot = {r: "; ".join(x for x in (partial.get(r), reasons.get(r), notes.get(r)) if x)
            for r in row_ids if r in partial or r in reasons or r in notes}
    out.attrs["footnotes"] = {shown[r]: why for r, why in foot.items()}
    return out


def _caption(caption: str, differs_because: str | None) -> str:
    text = caption.strip()
    if text and text[-1] not in ".!?":
        text += "."
    if differs_because:
        reason = differs_because.strip().rstrip(".")
        text += (" " if text else "") + f"Our numbers differ from the paper's because {reason}."
    return text


def _marks(df: pd.DataFrame) -> dict[str, str]:
    notes = df.attrs.get("footnotes", {})
    return {row: "abcdefghijklmnopqrstuvwxyz"[i % 26] for i, row in enumerate(notes)}


def to_markdown(df: pd.DataFrame, caption: str = "", differs_because: str | None = None,
                note: str = "") -> str:
    """A GitHub Markdown table with the caption above and legend, `note` (where the results were
    computed) and footnotes below."""
    marks = _marks(df)
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731 - a "|" would split the cell
    head = [esc((df.index.name or "").capitalize())] + [esc(f"{d} {m}") for d, m in df.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * len(df.columns)) + "|"]
    for row, values in df.iterrows():
        name = esc(row) + (f" ({marks[row]})" if row in marks else "")
        lines.append("| " + " | ".join([name, *map(esc, values)]) + " |")
    parts = [f"**{esc(_caption(caption, differs_because))}**", ""] if caption or differs_because else []
    parts += lines + ["", CELL_LEGEND] + ([esc(note)] if note else [])
    parts += [f"({marks[r]}) {r}: {why}" for r, why in df.attrs.get("footnotes", {}).items()]
    key = df.attrs.get("key", {})
    if key:
        parts += ["", "Rows of ours without a paper number: " +
                  "; ".join(f"**{esc(r)}**: {what}" for r, what in key.items()) + "."]
    return "\n".join(parts) + "\n"


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
          "|": r"\textbar{}", "–": "--", "−": "$-$", "Δ": r"$\Delta$", "<": r"\textless{}",
          ">": r"\textgreater{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters (and map the few non-ASCII symbols the tables use)."""
    return "".join(_LATEX.get(ch, ch) for ch in str(text))


def to_latex(df: pd.DataFrame, caption: str = "", label: str = "",
             differs_because: str | None = None, note: str = "") -> str:
    """A booktabs table: data sets as column groups, metrics below, footnotes under the tabular."""
    marks = _marks(df)
    groups: list[tuple[str, int]] = []
    for ds, _ in df.columns:
        if groups and groups[-1][0] == ds:
            groups[-1] = (ds, groups[-1][1] + 1)
        else:
            groups.append((ds, 1))
    spec = "l" + "".join(" " + "r" * n for _, n in groups)
    top, rules, col = [""], [], 2
    for ds, n in groups:
        top.append(rf"\multicolumn{{{n}}}{{c}}{{{latex_escape(ds)}}}")
        rules.append(rf"\cmidrule(lr){{{col}-{col + n - 1}}}")
        col += n
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(top) + r" \\", " ".join(rules),
             " & ".join([latex_escape((df.index.name or "").capitalize()),
                         *(latex_escape(m) for _, m in df.columns)]) + r" \\",
             r"\midrule"]
    for row, values in df.iterrows():
        name = latex_escape(row) + (rf"$^{{{marks[row]}}}$" if row in marks else "")
        lines.append(" & ".join([name, *map(latex_escape, values)]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    foot = [latex_escape(CELL_LEGEND)] + ([latex_escape(note)] if note else [])
    foot += [rf"$^{{{marks[r]}}}$ " + latex_escape(f"{r}: {why}")
             for r, why in df.attrs.get("footnotes", {}).items()]
    if df.attrs.get("key"):
        foot.append(latex_escape("Rows of ours without a paper number: " +
                                 "; ".join(f"{r}: {what}" for r, what in df.attrs["key"].items()) + "."))
    lines.append(r"\par\smallskip{\footnotesize " + r" \\ ".join(foot) + "}")
    cap = _caption(caption, differs_because)
    if cap:
        lines.append(rf"\caption{{{latex_escape(cap)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def save_table(df: pd.DataFrame, stem: str, dir: str | Path | None = None, caption: str = "",
               label: str | None = None, differs_because: str | None = None,
               note: str = "") -> tuple[Path, Path]:
    """Write <stem>.md and <stem>.tex side by side in `dir` (default tables/), each atomically."""
    directory = Path(dir or TABLES_DIR)
    md, tex = directory / f"{stem}.md", directory / f"{stem}.tex"
    with atomic_open(md) as fh:
        fh.write(to_markdown(df, caption, differs_because, note))
    with atomic_open(tex) as fh:
        fh.write(to_latex(df, caption, label if label is not None else f"tab:{stem}", differs_because,
                          note))
    return md, tex
