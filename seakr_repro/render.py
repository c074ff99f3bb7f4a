"""Step 90: every table and figure from saved results alone, beside the paper's numbers.

Each table spec names the results CSV a compute notebook saved, the paper table it sits beside, and
its caption. A table whose results are missing is listed as not rendered (with the step to run),
never silently left out.
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
              "Table 7: wall time per question (s), LLM call cache off (notebook 09 also lists LLM calls and retrievals).",
              metrics=("seconds_per_question",)),
)


def differs_because(cfg: Config) -> str | None:
    if cfg.profile == "paper":
        return None
    return (f"they come from the '{cfg.profile}' profile ({cfg['model.name']}, corpus "
            f"'{cfg['corpus.name']}', seakr-repro's bundled question sets written in the style of "
            f"2Wiki/HotpotQA and of single-hop QA) and are not comparable with the paper's "
            f"(LLaMA-2-7B-chat, DPR Wikipedia, official dev sets); bundled-single is shown under NQ")


def ours_for_table(df: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    from .experiments import paper_dataset_name

    out = df[df["metric"].isin(spec.metrics)].copy()
    out["dataset"] = out["dataset"].map(paper_dataset_name)
    return out


def render_table(cfg: Config, spec: TableSpec, out_dir: Path | None = None) -> tuple[Path, Path] | None:
    from .io import read_json
    from .reporting import load_paper_table, save_table, side_by_side

    path = results_dir(cfg.profile) / spec.results
    if not path.is_file():
        return None
    ours = ours_for_table(pd.read_csv(path), spec)
    paper = load_paper_table(spec.paper) if spec.paper else ours.iloc[:0]
    if spec.rows == "method" and "model" in paper.columns and paper["model"].nunique() > 1:
        paper = paper[paper["model"] == paper["model"].mode()[0]]
    skipped_file = path.with_name("skipped.json")
    reasons = read_json(skipped_file) if skipped_file.is_file() else None
    wide = side_by_side(ours, paper[paper["metric"].isin(spec.metrics)], rows=spec.rows,
                        reasons=reasons, show_ci="low" in ours.columns)
    return save_table(wide, spec.stem, out_dir or TABLES_DIR / cfg.profile,
                      caption=spec.caption, differs_because=differs_because(cfg))


def render_all(cfg: Config) -> pd.DataFrame:
    """Render every table whose results exist; return a status frame (table, rendered, files)."""
    status = []
    for spec in TABLES:
        files = render_table(cfg, spec)
        status.append({"table": spec.stem, "rendered": files is not None,
                       "files": ", ".join(str(p) for p in files) if files else
                       f"missing {spec.results}: run its notebook first"})
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
