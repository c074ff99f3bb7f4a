"""Step 90: every table and figure from saved results alone, beside the paper's numbers.

Each table's declaration (artifacts.py) names the results CSV a compute notebook saved, the paper
table it sits beside, and its caption. A table whose notebook has not finished is rendered from its
run files as they stand (rows marked "partial: n of N"), so a days-long step does not hold back the
others; a table with neither is listed as not rendered (with the step to run), never silently left
out. Figure 3 is drawn by `figure`, the function notebook 03 shows it with, markers included; its
files are this step's alone (artifacts.STEPS: one writer per output)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..artifacts import FIGURES, PAPER_DELTA_MODELS, TABLES as ARTIFACT_TABLES, Table
from ..artifacts import table as artifact_table
from ..core.config import Config
from ..core.paths import FIGURES_DIR, TABLES_DIR, results_dir


# Every table and figure is declared once, in artifacts.py; TABLES keeps the paper's order.
TABLES: tuple[Table, ...] = tuple(ARTIFACT_TABLES.values())


def _table(spec: Table | str) -> Table:
    return spec if isinstance(spec, Table) else artifact_table(spec)


# A profile runs the paper's setup when these settings equal the paper profile's (the backend, for
# one, does not count: paper-vllm runs the same model, data and constants on vLLM).
PAPER_SETUP = ("model.name", "corpus.name", "datasets.complex", "datasets.simple")


def differs_because(cfg: Config, datasets: list[str] | None = None) -> str | None:
    """Why the table's numbers differ from the paper's, or None when the profile runs its setup.
    `datasets`: our data sets in the table; each shown under a paper column of another name is
    named (the default's bundled look-alikes)."""
    from ..core.config import load_config
    from ..data.registry import paper_column

    paper = load_config("paper")
    if all(cfg[key] == paper[key] for key in PAPER_SETUP):
        n = cfg["datasets.n_questions"]
        return None if n is None else (f"they come from a seeded sample of {n} questions per data set "
                                       "(the paper: the whole dev sets)")
    shown = [f"{d} under {_column_name(d)}" for d in dict.fromkeys(datasets or [])
             if paper_column(d) != d]
    return (f"they come from the '{cfg.profile}' profile ({cfg['model.name']}, corpus "
            f"'{cfg['corpus.name']}', seakr-repro's bundled question sets written in the style of "
            f"2Wiki/HotpotQA and of single-hop QA) and are not comparable with the paper's "
            f"(LLaMA-2-7B-chat, DPR Wikipedia, official dev sets)"
            + (f"; our look-alike sets stand in the paper's columns: {', '.join(shown)}" if shown else ""))


def n_note(ours: pd.DataFrame) -> str:
    """'n (questions per data set): 2Wiki 8, HotpotQA 8' from our rows (a range where rows differ)."""
    if "n" not in ours.columns or ours.empty:
        return ""
    parts = []
    for dataset, rows in ours.groupby("dataset", sort=False):
        n = rows["n"].dropna().astype(int)
        if len(n):
            span = f"{n.min()}" if n.min() == n.max() else f"{n.min()}-{n.max()}"
            parts.append(f"{_column_name(dataset)} {span}")
    return "n (questions per data set): " + ", ".join(parts) + "." if parts else ""


def ours_for_table(df: pd.DataFrame, spec: Table | str) -> pd.DataFrame:
    from ..data.registry import paper_column

    spec = _table(spec)
    out = df[df["metric"].isin(spec.metrics)].copy()
    out["ours_dataset"] = out["dataset"]          # what ran (a bundled look-alike, say)
    out["dataset"] = out["dataset"].map(paper_column)
    return out


def _table_runs(cfg: Config, spec: Table) -> tuple[list[str], list[str]]:
    """(run labels, data sets) whose run files make up a table's rows (Tables 1-4)."""
    from ..runs.plan import table_datasets

    if spec.kind == "timing":         # timed runs of their own, not the shared run files
        return [], []
    labels = spec.methods if spec.rows == "method" else cfg.get("backbones.models", []) or []
    return list(labels), table_datasets(cfg, spec.key)


def partial_results(cfg: Config, spec: Table | str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Tidy rows from the run files of a step that has not finished, and {row: "partial: n of N
    ..."}. Per (label, data set) the newest run file is read (the one being written); only the
    questions of the prepared set count."""
    from ..evaluation import score_predictions
    from ..runs.grid import select_questions
    from .prepare import load_prepared
    from ..runs.runner import current_name, read_results
    from ..runs.plan import run_total

    spec = _table(spec)
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
            current = current_name(runs / dataset, label)      # the latest run's file, else the newest
            files = [f for f in files if f.name == current] or files
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
                             "n": score["n"],
                             "run_file": str(files[-1].relative_to(results_dir(cfg.profile)))})
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
    from ..data.registry import paper_column
    from ..reporting.tables import DATASET_NAMES

    name = paper_column(dataset)
    return DATASET_NAMES.get(name, name)


PARTIAL_CAPTION = ("Partial: its notebook has not finished; rows marked (partial) count the "
                   "questions done so far (footnotes).")
OFFICIAL_LIMIT_S = 20 * 60    # main_multihop.py: asyncio.wait_for(reasoner.solve(...), timeout=20*60)


def official_drop_note(cfg: Config, spec: Table, ours: pd.DataFrame) -> dict[str, str]:
    """{row: footnote} for SeaKR's rows on complex QA (Tables 1 and 3: the `seakr` row; Table 4:
    every backbone). The official multi-hop runs (main_multihop.py, run_one_question) write a
    question that raises or runs past 20 minutes to failed.jsonl, out of the scored set, and
    cancel the run at the 10th such error; simple QA (main_simpleqa.py) drops nothing. The
    package scores every question: the note counts the row's questions over 20 minutes (their
    own wall time, `seconds`) in the run files the rows name."""
    from ..data.registry import DATASETS
    from ..runs.runner import read_results

    if ours.empty or spec.rows not in ours.columns:
        return {}
    if spec.kind == "grid":
        labels = ["seakr"] if "seakr" in spec.methods else []
    else:
        labels = list(dict.fromkeys(ours[spec.rows])) if spec.kind == "backbones" else []
    complex_qa = ours["dataset"].map(lambda d: d in DATASETS and DATASETS[d].kind == "complex")
    notes = {}
    for label in labels:
        rows = ours[(ours[spec.rows] == label) & complex_qa]
        if rows.empty:
            continue
        note = ("the paper's SeaKR runs on complex QA leave out every question that fails or runs "
                "past 20 minutes, and stop at the 10th failure (main_multihop.py); this package "
                "scores every question")
        files = rows["run_file"].dropna().unique() if "run_file" in rows.columns else []
        done = [r for f in files for r in read_results(results_dir(cfg.profile) / f)]
        if done:
            over = sum(1 for r in done if float(r.get("seconds") or 0) > OFFICIAL_LIMIT_S)
            note += (f": {over} of the {len(done):,} questions in this row's run files took over "
                     "20 minutes, none failed (a failure here stops the run, which resumes)")
        notes[label] = note
    return notes


def _beside(cfg: Config, spec: Table, ours: pd.DataFrame, reasons: dict | None,
            partial: dict[str, str] | None = None) -> pd.DataFrame:
    """Our rows of one table beside the paper's (ours | paper | delta per cell)."""
    from ..artifacts import ROW_WORDS
    from ..reporting import load_paper_table, side_by_side

    notes = official_drop_note(cfg, spec, ours)
    ours = ours_for_table(ours, spec)
    if spec.rows == "method":                     # our own rows named in words, with a key
        ours["label"] = ours["method"].map(lambda m: ROW_WORDS.get(m, (m, ""))[0])
    paper = load_paper_table(spec.paper) if spec.paper else ours.iloc[:0]
    if spec.rows == "method" and "model" in paper.columns and paper["model"].nunique() > 1:
        paper = paper[paper["model"] == paper["model"].mode()[0]]
    table = side_by_side(ours, paper[paper["metric"].isin(spec.metrics)], rows=spec.rows,
                         reasons=reasons, show_ci="low" in ours.columns, partial=partial or {},
                         notes=notes)
    shown = set(ours["method"]) if spec.rows == "method" else set()
    table.attrs["key"] = {words: what for row, (words, what) in ROW_WORDS.items() if row in shown}
    table.attrs["n"] = n_note(ours)
    return table


def failure_note(ours: pd.DataFrame) -> str:
    """The caption's count of questions that failed for a reason of their own (scored as
    unanswered; each run file's `failed` lines say why), per row and data set."""
    if "failed" not in ours.columns:
        return ""
    cells = ours[ours["failed"].fillna(0) > 0].drop_duplicates(["method", "dataset"])
    if cells.empty:
        return ""
    return ("Failed questions, scored as unanswered (the run files' `failed` lines say why): "
            + ", ".join(f"{r.method} on {r.dataset} {int(r.failed)}" for r in cells.itertuples()) + ".")


def _caption_of(spec: Table, table: pd.DataFrame, *extra: str) -> str:
    """The declared caption, then what else it must say, then n per data set."""
    return " ".join(x for x in (spec.caption, *extra, table.attrs.get("n", "")) if x)


def beside_paper(key: str, cfg: Config, results: pd.DataFrame | None = None,
                 skipped: dict[str, str] | None = None) -> str:
    """One table beside the paper's, as Markdown with its caption and why the numbers differ.
    results / skipped: what `tables.run_table` returned (default: what its step saved)."""
    from ..core.io import read_json
    from ..reporting import to_markdown
    from ..runs.plan import table_datasets

    spec = artifact_table(key)
    path = results_dir(cfg.profile) / spec.results
    if results is None:
        results = pd.read_csv(path)
    if skipped is None and path.with_name("skipped.json").is_file():
        skipped = read_json(path.with_name("skipped.json"))
    table = _beside(cfg, spec, results, skipped)
    return to_markdown(table, _caption_of(spec, table, failure_note(results)),
                       differs_because(cfg, table_datasets(cfg, key)), computed_on(path))


def computed_on(results: Path) -> str:
    """'Computed on CPU, float32.': the device and dtype of a results file, from its provenance
    ("" when the file is not written yet: a partial table's rows)."""
    from ..core.device import compute_note
    from ..core.provenance import read_compute

    return compute_note([read_compute(results)]) if Path(results).is_file() else ""


def render_table(cfg: Config, spec: Table | str, out_dir: Path | None = None) -> tuple[Path, Path] | None:
    from ..core.io import read_json
    from ..reporting import save_table
    from ..runs.plan import table_datasets

    spec = _table(spec)
    path = results_dir(cfg.profile) / spec.results
    partial: dict[str, str] = {}
    if path.is_file():
        ours = pd.read_csv(path)
    else:
        ours, partial = partial_results(cfg, spec)
        if ours.empty:
            return None
    skipped_file = path.with_name("skipped.json")
    reasons = read_json(skipped_file) if skipped_file.is_file() else None
    wide = _beside(cfg, spec, ours, reasons, partial)
    caption = _caption_of(spec, wide, failure_note(ours), PARTIAL_CAPTION if partial else "")
    return save_table(wide, spec.stem, out_dir or TABLES_DIR / cfg.profile, caption=caption,
                      differs_because=differs_because(cfg, table_datasets(cfg, spec.key)), note=computed_on(path))


def render_all(cfg: Config) -> pd.DataFrame:
    """Render every table whose results exist; return a status frame (table, rendered, files).
    A table (or the claims ledger) with no results is skipped and its files are left as they
    are: rendering never replaces a committed table with an empty one."""
    from ..core.paths import repo_relative as relative

    status = []
    for spec in TABLES:
        files = render_table(cfg, spec)
        finished = (results_dir(cfg.profile) / spec.results).is_file()
        status.append({"table": spec.stem,
                       "rendered": "no" if files is None else "yes" if finished else "partial",
                       "files": ", ".join(relative(p) for p in files) if files else
                       f"skipped, files left as they are: no results/{cfg.profile}/{spec.results} "
                       f"(run notebook {spec.step})"})
    from .claims import render_ledger

    ledger = render_ledger(cfg, out_dir=TABLES_DIR / cfg.profile)   # TABLES_DIR as this module sees it
    claims_md = relative(TABLES_DIR / cfg.profile / "claims.md")
    if ledger is None:
        status.append({"table": "claims", "rendered": "no",
                       "files": f"skipped, {claims_md} left as it is: no claim can be measured from "
                                f"results/{cfg.profile}/ (run the notebooks first)"})
    else:
        complete = bool((ledger["measurement"] != "not measured").all())
        status.append({"table": "claims", "rendered": "yes" if complete else "partial",
                       "files": claims_md})
    return pd.DataFrame(status)


def plot_methods_vs_paper(ours: pd.DataFrame, paper: pd.DataFrame, metric: str = "f1",
                          title: str = ""):
    """Grouped bars per data set: our F1 per method (with CI) beside the paper's, same order.
    Each panel names our data set (a bundled look-alike is said to be one) and its n; every bar
    of ours carries its value, so a zero is seen, and a missing one reads n/a."""
    import matplotlib.pyplot as plt
    import numpy as np

    from ..reporting.figures import PALETTE, style

    ours = ours[ours["metric"] == metric]
    datasets = list(dict.fromkeys(ours["dataset"]))
    methods = list(dict.fromkeys(ours["method"]))
    look_alike = False
    with style():
        fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8), squeeze=False)
        for ax, ds in zip(axes[0], datasets):
            x = np.arange(len(methods))
            sub = ours[ours["dataset"] == ds].set_index("method").reindex(methods)
            err = None
            if {"low", "high"} <= set(sub.columns):
                err = np.nan_to_num(np.vstack([sub["value"] - sub["low"], sub["high"] - sub["value"]]).clip(min=0))
            ax.bar(x - 0.2, sub["value"].fillna(0), 0.4, yerr=err, color=PALETTE["blue"], label="ours",
                   capsize=2)
            tops = sub["high"] if "high" in sub.columns else sub["value"]
            for xi, v, top in zip(x, sub["value"], tops):
                if not pd.isna(v) and v == 0:          # a zero bar: drawn as a line on the axis
                    ax.plot([xi - 0.4, xi], [0, 0], color=PALETTE["blue"], linewidth=3, solid_capstyle="butt")
                above = max(v, top) if not (pd.isna(v) or pd.isna(top)) else (0 if pd.isna(v) else v)
                ax.text(xi - 0.2, above + 0.8, "n/a" if pd.isna(v) else f"{v:.0f}",
                        ha="center", va="bottom", fontsize=6)
            p = paper[(paper["dataset"] == ds) & (paper["metric"] == metric)].set_index("method")
            ax.bar(x + 0.2, [p["value"].get(m, np.nan) for m in methods], 0.4,
                   color=PALETTE["orange"], label="paper")
            ax.set_xticks(x, methods, rotation=30, ha="right")
            ax.set_ylim(bottom=0)
            name = _column_name(ds)
            sources = sub["ours_dataset"].dropna() if "ours_dataset" in sub.columns else pd.Series(dtype=str)
            source = sources.iloc[0] if len(sources) else ds
            ns = sub["n"].dropna().astype(int) if "n" in sub.columns else pd.Series(dtype=int)
            n = "" if ns.empty else f", n = {ns.min()}" if ns.min() == ns.max() else f", n = {ns.min()}-{ns.max()}"
            if str(source).startswith("bundled"):
                look_alike = True
                ax.set_title(f"{name} (paper) | ours: {source}{n}", fontsize=8)
            else:
                ax.set_title(f"{name}{n}")
            ax.set_ylabel(f"{metric.upper()} (%)")
        axes[0][0].legend(loc="best")
        if title:
            fig.suptitle(title)
        if look_alike:
            fig.text(0.01, -0.02, "Ours ran on seakr-repro's bundled look-alike question sets with a small "
                     "model: the bars sit beside the paper's for their shape, the values are not comparable.",
                     fontsize=7, va="top")
        fig.tight_layout()
    return fig


def figure3_markers(cfg: Config, panel: str, data: pd.DataFrame) -> dict:
    """The marker lines of a Figure 3 panel (artifacts.FIGURE3), from what step 03 used and saved:
    the layer U is read at (uncertainty.layer resolved for the model), and the calibrated delta of
    eigen (calibration/delta.json) with the paper's -6 beside it where the model is the paper's."""
    from ..uncertainty.thresholds import calibrated_deltas, delta_path, u_layer
    from ..reporting.figures import PAPER_DELTA

    marker = FIGURES[panel].marker
    if marker == "layer":
        return {"chosen_layer": u_layer(cfg, int(data["layer"].max()) + 1)}
    if marker == "delta":
        chosen = calibrated_deltas(cfg).get("eigen") if delta_path(cfg).is_file() else None
        paper = PAPER_DELTA if cfg["model.name"].startswith(PAPER_DELTA_MODELS) else None
        return {"chosen_delta": chosen, "paper_delta": paper}
    return {}


def figure(panel: str, cfg: Config):
    """One declared figure panel (artifacts.FIGURES) drawn from its saved CSV, markers included;
    None when its step has not run."""
    from ..reporting import figures

    spec = FIGURES[panel]
    path = results_dir(cfg.profile) / spec.csv
    if not path.is_file():
        return None
    data = pd.read_csv(path)
    return getattr(figures, spec.plot)(data, **figure3_markers(cfg, panel, data))


def draw_figure(panel: str, cfg: Config, out_dir: Path | None = None) -> list[Path]:
    """`figure` saved as PNG and PDF under figures/<profile>/ ([] when its step has not run), by
    step 90 only; notebook 03 shows the same `figure`, markers included, without saving it."""
    from ..reporting import figures

    fig = figure(panel, cfg)
    if fig is None:
        return []
    return list(figures.save_figure(fig, FIGURES[panel].stem, out_dir or FIGURES_DIR / cfg.profile).values())


def declared_figures() -> list[str]:
    """The stems of every figure `render_figures` draws (each table's F1 figure, Figure 3's panels)."""
    return [spec.f1_figure for spec in TABLES if spec.f1_figure] + list(FIGURES)


def render_figures(cfg: Config) -> list[Path]:
    """Every declared figure from saved results: each table's F1 ours vs paper (artifacts.Table.
    f1_figure) and Figure 3's three panels with their markers."""
    from ..reporting import figures, load_paper_table

    res, out, written = results_dir(cfg.profile), FIGURES_DIR / cfg.profile, []
    for spec in TABLES:
        path = res / spec.results
        if spec.f1_figure and path.is_file():
            ours = ours_for_table(pd.read_csv(path), spec)
            fig = plot_methods_vs_paper(ours, load_paper_table(spec.paper), "f1",
                                        spec.caption.split(":")[0] + ": F1, ours vs paper")
            written += list(figures.save_figure(fig, spec.f1_figure, out).values())
    for panel in FIGURES:
        written += draw_figure(panel, cfg, out)
    return written
