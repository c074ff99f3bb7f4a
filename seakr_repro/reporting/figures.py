"""Figures: one matplotlib style for every plot, atomic PNG + PDF output, and the three panels of
the paper's Figure 3 (hyper-parameter search) drawn from the DataFrames of uncertainty.analysis.

The Agg backend is selected here (headless papermill runs, CI); notebooks that already chose an
inline backend keep it because `matplotlib.use` is only called when pyplot is not yet imported."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

if "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ..core.errors import UserError  # noqa: E402
from ..core.io import atomic_path  # noqa: E402
from ..uncertainty.eigenscore import OFFICIAL_DELTA  # noqa: E402

# Okabe & Ito (2008): distinguishable with the common colour-vision deficiencies and in greyscale.
PALETTE = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00",
           "sky": "#56B4E9", "purple": "#CC79A7", "yellow": "#F0E442", "black": "#000000"}
CYCLE = [PALETTE[c] for c in ("blue", "orange", "green", "vermillion", "sky", "purple", "black")]

STYLE = {
    "figure.figsize": (4.2, 3.0), "figure.dpi": 100,
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5,
    "lines.linewidth": 1.6, "lines.markersize": 4, "legend.frameon": False,
    "axes.prop_cycle": matplotlib.cycler(color=CYCLE),
    "pdf.fonttype": 42,                                   # editable text in the PDF
}
PAPER_DELTA = OFFICIAL_DELTA  # SeaKR's threshold for LLaMA-2-7B-chat (§5.3)
PAPER_BEST_K = (10, 25)     # §5.3: the best k lies in [10, 25]


def style():
    """Context manager applying the shared style: `with style(): fig, ax = plt.subplots()`."""
    return plt.rc_context(STYLE)


def save_figure(fig, stem: str, directory: str | Path) -> dict[str, Path]:
    """Write `<directory>/<stem>.png` (150 dpi) and `.pdf`, each atomically; returns the paths.
    The PDF carries no creation date so re-rendering identical data gives identical files."""
    if not stem or Path(stem).name != stem:
        raise UserError(f"figure stem {stem!r} must be a plain file name without folders",
                        setting="stem", fix="pass the folder as `directory`")
    out = {}
    for ext, kwargs in (("png", {"dpi": 150}), ("pdf", {"metadata": {"CreationDate": None}})):
        path = Path(directory) / f"{stem}.{ext}"
        with atomic_path(path) as tmp:
            # bbox given here: the style's rc_context is no longer active when saving.
            fig.savefig(tmp, format=ext, bbox_inches="tight", **kwargs)
        out[ext] = path
    return out


def _need(df: pd.DataFrame, cols, what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise UserError(f"the {what} table lacks column(s) {', '.join(missing)}", setting=what,
                        fix="pass the DataFrame returned by seakr_repro.uncertainty.analysis")


def _line_with_band(ax, x, df, label, color):
    ax.axhline(0.5, color="0.6", linewidth=0.8, linestyle="-", zorder=0)   # chance level
    ax.plot(x, df["auroc"], marker="o", color=color, label=label)
    if {"lo", "hi"} <= set(df.columns) and df[["lo", "hi"]].notna().all().all():
        ax.fill_between(x, df["lo"], df["hi"], color=color, alpha=0.2, linewidth=0,
                        label="bootstrap CI")


def _axes(ax):
    # Called inside `with style()`, so a new figure gets the shared style.
    return (ax.figure, ax) if ax is not None else plt.subplots()


def n_label(df: pd.DataFrame) -> str:
    """'n = 40 questions, 38 wrong closed-book' from the n / n_incorrect columns, if present."""
    if "n" not in df.columns or df["n"].isna().all():
        return ""
    n = int(df["n"].max())
    wrong = f", {int(df['n_incorrect'].max())} wrong closed-book" if "n_incorrect" in df.columns else ""
    return f"n = {n} questions{wrong}"


def _title(ax, title: str, df: pd.DataFrame) -> None:
    n = n_label(df)
    ax.set_title(title + (f"\n{n}" if n else ""))


def _note(ax, text: str) -> None:
    """A sentence under the axes (what the plot cannot show, or where a marker lies)."""
    ax.text(0.0, -0.2, text, transform=ax.transAxes, fontsize=7, va="top", wrap=True)


def why_undefined(df: pd.DataFrame) -> str:
    """Why a table of AUROCs has none to draw ('' when it has some): AUROC ranks wrong answers
    against right ones, so it is undefined when all are wrong or all are right."""
    if not df.empty and df["auroc"].notna().any():
        return ""
    if {"n", "n_incorrect"} <= set(df.columns) and df["n"].notna().any():
        n, wrong = int(df["n"].max()), int(df["n_incorrect"].max())
        if wrong == n:
            return (f"AUROC is undefined: all {n} answers were wrong closed-book, so there is no right "
                    "answer to rank them against.")
        if wrong == 0:
            return f"AUROC is undefined: all {n} answers were right closed-book, so there is no wrong answer to detect."
    return "AUROC is undefined here: no question had both a right and a wrong answer to rank."


def _nothing(ax, title: str, df: pd.DataFrame, why: str):
    """Axes with nothing to draw: the title and the reason in words, no meaningless ticks."""
    _title(ax, title, df)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center", fontsize=8, wrap=True)
    return ax.figure


def plot_quality_vs_k(df: pd.DataFrame, ax=None, mark_paper_range: bool = True,
                      label: str = "U(c)"):
    """AUROC of U(c) against the number of samples k (Figure 3, left). The paper's best range
    of k is shaded only where our k reaches it; a note says when it lies beyond our k."""
    _need(df, ["k", "auroc"], "quality_vs_k")
    with style():
        fig, ax = _axes(ax)
        if why_undefined(df):
            return _nothing(ax, "Quality vs number of samples", df, why_undefined(df))
        k_max, (best_lo, best_hi) = int(df["k"].max()), PAPER_BEST_K
        if mark_paper_range and k_max > best_lo:
            ax.axvspan(best_lo, min(best_hi, k_max), color=PALETTE["yellow"], alpha=0.25, linewidth=0,
                       label=f"paper: best k {best_lo}-{best_hi}")
        _line_with_band(ax, df["k"], df, label, PALETTE["blue"])
        ax.set_xlabel("samples k")
        ax.set_ylabel("AUROC (closed-book incorrect)")
        _title(ax, "Quality vs number of samples", df)
        ax.legend(loc="best")
        if mark_paper_range and k_max < best_hi:
            _note(ax, f"The paper's best k is {best_lo}-{best_hi}; our k stops at {k_max} "
                      "(uncertainty.k), so that range is " +
                      ("only partly shown." if k_max > best_lo else "not reached."))
    return fig


def plot_quality_vs_layer(df: pd.DataFrame, ax=None, chosen_layer: int | None = None,
                          label: str = "U(c)"):
    """AUROC of U(c) against the layer its vectors come from (Figure 3, middle)."""
    _need(df, ["layer", "auroc"], "quality_vs_layer")
    with style():
        fig, ax = _axes(ax)
        if why_undefined(df):
            return _nothing(ax, "Quality vs layer", df, why_undefined(df))
        _line_with_band(ax, df["layer"], df, label, PALETTE["green"])
        if chosen_layer is not None:
            ax.axvline(chosen_layer, color=PALETTE["black"], linestyle="--", linewidth=1,
                       label=f"used: layer {chosen_layer}")
        ax.set_xlabel("layer (0-based)")
        ax.set_ylabel("AUROC (closed-book incorrect)")
        _title(ax, "Quality vs layer", df)
        ax.legend(loc="best")
    return fig


def plot_delta_tradeoff(df: pd.DataFrame, ax=None, chosen_delta: float | None = None,
                        paper_delta: float | None = None):
    """Retrieval rate and closed-book accuracy of the non-retrieved questions against delta
    (Figure 3, right); also the adaptive accuracy when the sweep has it. Pass
    `paper_delta=PAPER_DELTA` for LLaMA-2-7B, where the paper's -6 is comparable."""
    _need(df, ["delta", "retrieval_rate", "acc_kept"], "delta_sweep")
    d = df.sort_values("delta")
    with style():
        fig, ax = _axes(ax)
        if d.empty or d["retrieval_rate"].isna().all():
            return _nothing(ax, "Retrieval trade-off vs δ", d, "Nothing to draw: the sweep over δ has no "
                            "questions (no uncertainty values were computed).")
        ax.step(d["delta"], d["retrieval_rate"], where="post", color=PALETTE["blue"],
                label="retrieval rate (U > δ)")
        ax.step(d["delta"], d["acc_kept"], where="post", color=PALETTE["orange"],
                label="accuracy, not retrieved")
        if "acc_adaptive" in d.columns:
            ax.step(d["delta"], d["acc_adaptive"], where="post", color=PALETTE["green"],
                    label="accuracy, adaptive")
        if chosen_delta is not None and np.isfinite(chosen_delta):
            ax.axvline(chosen_delta, color=PALETTE["black"], linestyle="--", linewidth=1,
                       label=f"chosen δ = {chosen_delta:.2f}")
        if paper_delta is not None:
            ax.axvline(paper_delta, color=PALETTE["vermillion"], linestyle=":", linewidth=1.2,
                       label=f"paper δ = {paper_delta:g}")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("threshold δ")
        ax.set_ylabel("fraction of questions")
        _title(ax, "Retrieval trade-off vs δ", d)
        ax.legend(loc="best")
        notes = [_outside(chosen_delta, d, "the chosen"), _outside(paper_delta, d, "the paper's")]
        if any(notes):
            _note(ax, " ".join(n for n in notes if n))
    return fig


def _outside(delta: float | None, sweep: pd.DataFrame, whose: str) -> str:
    """A sentence when a δ marker lies outside our U values (every or no question retrieves)."""
    if delta is None or not np.isfinite(delta):
        return ""
    at = int(sweep["delta"].searchsorted(delta, side="right")) - 1
    rate = 1.0 if at < 0 else float(sweep["retrieval_rate"].iloc[at])
    if rate >= 1.0:
        return f"{whose.capitalize()} δ = {delta:.2f} lies below every U here: every question retrieves."
    if rate <= 0.0:
        return f"{whose.capitalize()} δ = {delta:.2f} lies above every U here: no question retrieves."
    return ""
