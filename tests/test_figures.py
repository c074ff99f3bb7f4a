import numpy as np
import pandas as pd
import pytest

from seakr_repro.core.errors import UserError
from seakr_repro.reporting.figures import (
    PAPER_DELTA,
    plot_delta_tradeoff,
    plot_quality_vs_k,
    plot_quality_vs_layer,
    save_figure,
)
from seakr_repro.uncertainty import calibrate_delta, delta_sweep


def _check_written(paths):
    png, pdf = paths["png"].read_bytes(), paths["pdf"].read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 2000
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000


def test_three_panels_write_png_and_pdf(tmp_path):
    k_df = pd.DataFrame({"k": [2, 5, 10, 20], "auroc": [0.6, 0.66, 0.7, 0.71],
                         "lo": [0.55, 0.6, 0.65, 0.66], "hi": [0.65, 0.7, 0.75, 0.76]})
    layer_df = pd.DataFrame({"layer": range(0, 30, 5), "auroc": np.linspace(0.55, 0.7, 6),
                             "lo": np.nan, "hi": np.nan})                 # no CI band
    rng = np.random.default_rng(0)
    u = rng.normal(-5.5, 0.6, 100)
    correct = (u + rng.normal(0, 0.5, 100)) < -5.5
    cal = calibrate_delta(u, correct)
    sweep = delta_sweep(u, correct, correct_with_retrieval=rng.random(100) < 0.6)
    figs = {"k": plot_quality_vs_k(k_df), "layer": plot_quality_vs_layer(layer_df, chosen_layer=15),
            "delta": plot_delta_tradeoff(sweep, chosen_delta=cal.delta, paper_delta=PAPER_DELTA)}
    for stem, fig in figs.items():
        _check_written(save_figure(fig, f"fig3_{stem}", tmp_path / "figures"))
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        f"fig3_{s}.{e}" for s in figs for e in ("png", "pdf"))                # no temp leftovers
    labels = [t.get_text() for t in figs["delta"].axes[0].get_legend().get_texts()]
    assert "paper δ = -6" in labels and "accuracy, adaptive" in labels
    assert any("bootstrap CI" in t.get_text()
               for t in figs["k"].axes[0].get_legend().get_texts())


def test_bad_table_and_stem(tmp_path):
    with pytest.raises(UserError, match="auroc"):
        plot_quality_vs_k(pd.DataFrame({"k": [1]}))
    fig = plot_quality_vs_layer(pd.DataFrame({"layer": [1, 2], "auroc": [0.5, 0.6]}))
    with pytest.raises(UserError, match="stem"):
        save_figure(fig, "sub/name", tmp_path)


def test_pdf_is_reproducible(tmp_path):
    df = pd.DataFrame({"layer": [1, 2], "auroc": [0.5, 0.6]})
    a = save_figure(plot_quality_vs_layer(df), "a", tmp_path)["pdf"].read_bytes()
    b = save_figure(plot_quality_vs_layer(df), "b", tmp_path)["pdf"].read_bytes()
    assert a == b
