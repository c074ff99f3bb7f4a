"""Step 90: every table and figure from saved results alone, beside the paper's numbers.

Each table spec names the results CSV a compute notebook saved, the paper table it sits beside, and
its caption. A table whose notebook has not finished is rendered from its run files as they stand
(rows marked "partial: n of N"), so a days-long step does not hold back the others; a table with
neither is listed as not rendered (with the step to run), never silently left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .config import Config
from .paths import FIGURES_DIR, TABLES_DIR, results_dir


@dataclass(frozen=True)
class TableSpec:
    stem: str
    results: str            # relative to results/<profile>/
    paper: str | None       # data/paper/<name>.csv
    caption: str
    rows: str = "method"
    metrics: tuple = ("em", "f1")


TABLES = (
    TableSpec("table1_complex_qa", "04-complex-qa/results.csv", "seakr_table1",
              "Table 1: complex (multi-hop) QA, EM and F1 (%)."),
    TableSpec("table2_simple_qa", "05-simple-qa/results.csv", "seakr_table2",
              "Table 2: simple (single-hop) QA with one retrieval round, EM and F1 (%)."),
    TableSpec("table3_ablations", "06-ablations/results.csv", "seakr_table3",
              "Table 3: SeaKR ablations (estimators, self-aware retrieval, re-ranking, reasoning), EM and F1 (%)."),
    TableSpec("table4_backbones", "07-backbones/results.csv", "seakr_table4",
              "Table 4: SeaKR with different backbone LLMs, EM and F1 (%).", rows="model"),
    TableSpec("table7_efficiency", "09-efficiency/results.csv", "seakr_table7",
              "Table 7: wall time per question (s), LLM call cache off "
              "(notebook 09 also lists LLM calls and retrievals).",
              metrics=("seconds_per_question",)),
)


# A profile runs the paper's setup when these settings equal the paper profile's (the backend, for
# one, does not count: paper-vllm runs the same model, data and constants on vLLM).
PAPER_SETUP = ("model.name", "corpus.name", "datasets.complex", "datasets.simple")


def differs_because(cfg: Config) -> str | None:
    """Why the table's numbers differ from the paper's, or None when the profile runs its setup."""
    from .config import load_config

    paper = load_config("paper")
    if all(cfg[key] == paper[key] for key in PAPER_SETUP):
        n = cfg["datasets.n_questions"]
        return None if n is None else (f"they come from a seeded sample of {n} questions per data set "
                                       "(the paper: the whole dev sets)")
    return (f"they come from the '{cfg.profile}' profile ({cfg['model.name']}, corpus "
            f"'{cfg['corpus.name']}', seakr-repro's bundled question sets written in the style of "
            f"2Wiki/HotpotQA and of single-hop QA) and are not comparable with the paper's "
            f"(LLaMA-2-7B-chat, DPR Wikipedia, official dev sets); bundled-single is shown under NQ")


def ours_for_table(df: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    from .experiments import paper_dataset_name

    out = df[df["metric"].isin(spec.metrics)].copy()
    out["dataset"] = out["dataset"].map(paper_dataset_name)
    return out


def _table_runs(cfg: Config, spec: TableSpec) -> tuple[list[str], list[str]]:
    """(run labels, data sets) whose run files make up a table's rows (Tables 1-4)."""
    from .experiments import ABLATIONS, TABLE1_METHODS, TABLE2_METHODS
    from .prepare import profile_datasets

    step = spec.results.split("/")[0]
    if step == "04-complex-qa":
        return list(TABLE1_METHODS), list(cfg["datasets.complex"])
    if step == "05-simple-qa":
        return list(TABLE2_METHODS), list(cfg["datasets.simple"])
    if step == "06-ablations":
        return list(ABLATIONS), profile_datasets(cfg)
    if step == "07-backbones":
        return list(cfg.get("backbones.models", []) or []), profile_datasets(cfg)
    return [], []


def partial_results(cfg: Config, spec: TableSpec) -> tuple[pd.DataFrame, dict[str, str]]:
    """Tidy rows from the run files of a step that has not finished, and {row: "partial: n of N
    ..."}. Per (label, data set) the newest run file is read (the one being written); only the
    questions of the prepared set count."""
    from .evaluation import score_predictions
    from .experiments import select_questions
    from .prepare import load_prepared
    from .runner import read_results
    from .status import run_total

    labels, datasets = _table_runs(cfg, spec)
    runs = results_dir(cfg.profile) / "runs"
    rows, counts = [], {}
    for dataset in datasets:
        prepared = None
        for label in labels:
            files = sorted(runs.glob(f"{dataset}/{label}-*.jsonl"), key=lambda p: p.stat().st_mtime)
            files = [f for f in files if f.stem.rsplit("-", 1)[0] == label]   # not "seakr-x" for "seakr"
            if not files:
                continue
            if prepared is None:
                prepared = [r.id for r in load_prepared(cfg, dataset)]
            total = run_total(cfg, dataset, label) or len(prepared)
            # the questions the run will answer: the same seeded sample run_grid draws
            wanted = {r.id for r in select_questions(cfg, dataset, min(total, len(prepared)))}
            done = [r for r in read_results(files[-1]) if r["id"] in wanted]
            if not done:
                continue
            score = score_predictions([r["answer"] for r in done], [r["golds"] for r in done],
                                      n_boot=cfg["evaluation.bootstrap_samples"], seed=cfg["seed"])
            for metric in ("em", "f1"):
                rows.append({"method": label, "model": label if spec.rows == "model" else cfg["model.name"],
                             "dataset": dataset, "metric": metric, "value": score[metric],
                             "low": score[f"{metric}_low"], "high": score[f"{metric}_high"],
                             "n": score["n"]})
            counts.setdefault(label, {})[dataset] = (len(done), total)
    notes = {}
    for label, by_dataset in counts.items():      # a row is partial until every data set is done
        parts, complete = [], True
        for dataset in datasets:
            done, total = by_dataset.get(dataset, (0, run_total(cfg, dataset, label)))
            complete &= total is not None and done >= total
            name = _column_name(dataset)
            parts.append(f"{done:,} of {total:,} questions on {name}" if total is not None
                         else f"{name} not started")
        if not complete:
            notes[label] = "partial: " + ", ".join(parts) + " (run in progress)"
    return pd.DataFrame(rows), notes


def _column_name(dataset: str) -> str:
    from .experiments import paper_dataset_name
    from .reporting.tables import DATASET_NAMES

    name = paper_dataset_name(dataset)
    return DATASET_NAMES.get(name, name)


PARTIAL_CAPTION = ("Partial: its notebook has not finished; rows marked (partial) count the "
                   "questions done so far (footnotes).")


def render_table(cfg: Config, spec: TableSpec, out_dir: Path | None = None) -> tuple[Path, Path] | None:
    from .io import read_json
    from .reporting import load_paper_table, save_table, side_by_side

    path = results_dir(cfg.profile) / spec.results
    partial: dict[str, str] = {}
    if path.is_file():
        ours = ours_for_table(pd.read_csv(path), spec)
    else:
        found, partial = partial_results(cfg, spec)
        if found.empty:
            return None
        ours = ours_for_table(found, spec)
    paper = load_paper_table(spec.paper) if spec.paper else ours.iloc[:0]
    if spec.rows == "method" and "model" in paper.columns and paper["model"].nunique() > 1:
        paper = paper[paper["model"] == paper["model"].mode()[0]]
    skipped_file = path.with_name("skipped.json")
    reasons = read_json(skipped_file) if skipped_file.is_file() else None
    wide = side_by_side(ours, paper[paper["metric"].isin(spec.metrics)], rows=spec.rows,
                        reasons=reasons, show_ci="low" in ours.columns, partial=partial)
    caption = spec.caption + (" " + PARTIAL_CAPTION if partial else "")
    return save_table(wide, spec.stem, out_dir or TABLES_DIR / cfg.profile,
                      caption=caption, differs_because=differs_because(cfg))


def render_all(cfg: Config) -> pd.DataFrame:
    """Render every table whose results exist; return a status frame (table, rendered, files)."""
    status = []
    for spec in TABLES:
        files = render_table(cfg, spec)
        finished = (results_dir(cfg.profile) / spec.results).is_file()
        status.append({"table": spec.stem,
                       "rendered": "no" if files is None else "yes" if finished else "partial",
                       "files": ", ".join(str(p) for p in files) if files else
                       f"missing {spec.results}: run its notebook first"})
    # the paper's claims, measured on whatever this profile has run so far (reporting/claims.py)
    from .reporting.claims import render_ledger

    ledger = render_ledger(cfg, out_dir=TABLES_DIR / cfg.profile)   # TABLES_DIR as this module sees it
    measured = int((ledger["measurement"] != "not measured").sum())
    status.append({"table": "claims", "rendered": "yes" if measured else "partial",
                   "files": str(TABLES_DIR / cfg.profile / "claims.md")})
    return pd.DataFrame(status)


def plot_methods_vs_paper(ours: pd.DataFrame, paper: pd.DataFrame, metric: str = "f1",
                          title: str = ""):
    """Grouped bars per data set: our F1 per method (with CI) beside the paper's, same order."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .reporting.figures import PALETTE, style

    ours = ours[ours["metric"] == metric]
    datasets = list(dict.fromkeys(ours["dataset"]))
    methods = list(dict.fromkeys(ours["method"]))
    with style():
        fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.6), squeeze=False)
        for ax, ds in zip(axes[0], datasets):
            x = np.arange(len(methods))
            sub = ours[ours["dataset"] == ds].set_index("method").reindex(methods)
            err = None
            if {"low", "high"} <= set(sub.columns):
                err = np.vstack([sub["value"] - sub["low"], sub["high"] - sub["value"]]).clip(min=0)
            ax.bar(x - 0.2, sub["value"], 0.4, yerr=err, color=PALETTE["blue"], label="ours", capsize=2)
            p = paper[(paper["dataset"] == ds) & (paper["metric"] == metric)].set_index("method")
            ax.bar(x + 0.2, [p["value"].get(m, np.nan) for m in methods], 0.4,
                   color=PALETTE["orange"], label="paper")
            ax.set_xticks(x, methods, rotation=30, ha="right")
            ax.set_title(ds)
            ax.set_ylabel(f"{metric.upper()} (%)")
        axes[0][0].legend(loc="best")
        if title:
            fig.suptitle(title)
        fig.tight_layout()
    return fig


def figure_dir(cfg: Config) -> Path:
    return FIGURES_DIR / cfg.profile


def render_figures(cfg: Config) -> list[Path]:
    """Figures from saved results: Tables 1/2 F1 ours vs paper, and Figure 3's three panels."""
    from .calibration import read_deltas
    from .reporting import figures, load_paper_table

    res, out, written = results_dir(cfg.profile), figure_dir(cfg), []
    for stem, spec, paper_name in (("table1_f1", TABLES[0], "seakr_table1"),
                                   ("table2_f1", TABLES[1], "seakr_table2")):
        path = res / spec.results
        if path.is_file():
            ours = ours_for_table(pd.read_csv(path), spec)
            fig = plot_methods_vs_paper(ours, load_paper_table(paper_name), "f1",
                                        spec.caption.split(":")[0] + ": F1, ours vs paper")
            written += list(figures.save_figure(fig, stem, out).values())
    panels = (("quality_vs_k", "figure3_k", figures.plot_quality_vs_k, {}),
              ("quality_vs_layer", "figure3_layer", figures.plot_quality_vs_layer, {}),
              ("delta_sweep", "figure3_delta", figures.plot_delta_tradeoff,
               {"chosen_delta": read_deltas(cfg).get("eigen")}))
    for name, stem, plot, kwargs in panels:
        path = res / "03-uncertainty-estimators" / f"{name}.csv"
        if path.is_file():
            written += list(figures.save_figure(plot(pd.read_csv(path), **kwargs), stem, out).values())
    return written
