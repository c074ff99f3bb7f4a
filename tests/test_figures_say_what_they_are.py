"""Figures and tables that say what they are: n on every panel and table, our look-alike data sets
named, a note where our k cannot reach the paper's or a δ marker lies outside the data, bars from
zero with zeros drawn, Table 3's own rows in words with a key, no NQ clause under Table 1."""
import numpy as np
import pandas as pd

from seakr_repro.core.config import load_config
from seakr_repro.reporting import figures as F
from seakr_repro.reporting import load_paper_table, to_markdown
from seakr_repro.runs.plan import table_datasets
from seakr_repro.steps import render
from seakr_repro.uncertainty.analysis import delta_sweep, quality_vs_k


def _texts(fig) -> str:
    return " ".join([t.get_text() for ax in fig.axes for t in ax.texts] +
                    [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.texts])


def test_figure3_states_n_and_where_our_k_stops():
    rng = np.random.default_rng(0)
    incorrect = (np.arange(40) % 20 != 0).astype(int)
    k = quality_vs_k(rng.normal(size=(40, 10, 4)), incorrect, [2, 6, 10])
    text = _texts(F.plot_quality_vs_k(k))
    assert "n = 40 questions, 38 wrong closed-book" in text
    assert "our k stops at 10" in text and "not reached" in text


def test_a_delta_marker_outside_the_data_is_said():
    u = np.linspace(-1, 1, 20)
    sweep = delta_sweep(u, np.arange(20) % 2)
    text = _texts(F.plot_delta_tradeoff(sweep, chosen_delta=-2.0, paper_delta=-6.0))
    assert "chosen δ = -2.00 lies below every U here: every question retrieves" in text
    assert "n = 20 questions" in text
    assert "lies" not in _texts(F.plot_delta_tradeoff(sweep, chosen_delta=0.0))


def test_f1_figure_names_the_look_alike_set_its_n_and_draws_a_zero():
    spec = render.artifact_table("table1")
    ours = pd.DataFrame([{"method": m, "dataset": "bundled-2wiki", "metric": "f1", "value": v,
                          "low": v, "high": v + 5, "n": 8} for m, v in (("cot", 0.0), ("seakr", 30.0))])
    fig = render.plot_methods_vs_paper(render.ours_for_table(ours, spec), load_paper_table(spec.paper))
    text = _texts(fig)
    assert "ours: bundled-2wiki, n = 8" in text and "not comparable" in text
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    assert any(list(line.get_ydata()) == [0, 0] for line in ax.lines)     # the zero bar, drawn
    assert "0" in [t.get_text() for t in ax.texts]


def test_tables_state_n_name_their_rows_and_only_their_columns():
    cfg = load_config("default")
    spec = render.artifact_table("table3")
    rows = [{"method": m, "dataset": d, "metric": x, "value": 10.0, "n": n}
            for m in ("seakr", "faithful", "estimator-perplexity-true")
            for d, n in (("bundled-2wiki", 3), ("bundled-single", 2)) for x in ("em", "f1")]
    table = render._beside(cfg, spec, pd.DataFrame(rows), None)
    md = to_markdown(table, render._caption_of(spec, table))
    assert "n (questions per data set): 2Wiki 3, NQ 2." in md
    assert "| SeaKR, official code |" in md and "| faithful |" not in md
    assert "**SeaKR, official code**: SeaKR as the authors' code runs it" in md
    assert "**Perplexity (true)**" in md
    # Table 1 runs no single-hop set: its caption says nothing of NQ
    because = render.differs_because(cfg, table_datasets(cfg, "table1"))
    assert "NQ" not in because and "bundled-2wiki under 2Wiki" in because


def test_table7_shows_intervals():
    cfg = load_config("default")
    spec = render.artifact_table("table7")
    ours = pd.DataFrame([{"method": "seakr", "dataset": "bundled-2wiki", "metric": "seconds_per_question",
                          "value": 2.5, "low": 2.0, "high": 3.25, "n": 2}])
    md = to_markdown(render._beside(cfg, spec, ours, None))
    assert "2.50 [2.00, 3.25]" in md
