"""Side-by-side tables: cell contents, missing values, footnotes, Markdown/LaTeX golden snippets."""
import pandas as pd
import pytest

from seakr_repro.core.errors import UserError
from seakr_repro.reporting import load_paper_table, save_table, side_by_side, to_latex, to_markdown
from seakr_repro.reporting.tables import latex_escape

OURS = pd.DataFrame([
    {"method": "seakr", "dataset": "2wiki", "metric": "f1", "value": 33.04, "low": 31.0, "high": 35.1},
    {"method": "seakr", "dataset": "2wiki", "metric": "em", "value": 27.5},
    {"method": "DRAGIN", "dataset": "HotpotQA", "metric": "F1", "value": 35.0},
    {"method": "ours-only", "dataset": "2wiki", "metric": "em", "value": 1.0},
])


@pytest.fixture
def table():
    return side_by_side(OURS, load_paper_table("seakr_table1"),
                        reasons={"self-rag": "checkpoint not supplied"})


def test_cells_ours_paper_delta(table):
    assert table.loc["SEAKR", ("2Wiki", "F1")] == "33.0 | 36.0 | -3.0"
    assert table.loc["SEAKR", ("2Wiki", "EM")] == "27.5 | 30.2 | -2.7"
    assert table.loc["DRAGIN", ("HotpotQA", "F1")] == "35.0 | 34.2 | +0.8"  # names matched canonically
    assert table.loc["CoT", ("IIRC", "EM")] == "– | 13.9 | –"
    assert table.loc["ours-only", ("2Wiki", "EM")] == "1.0 | – | –"
    # rows: the paper's order (with its labels), then ours; columns dataset x metric
    assert list(table.index) == ["CoT", "IR-CoT", "Self-RAG", "FLARE", "DRAGIN", "SEAKR", "ours-only"]
    assert list(table.columns)[:2] == [("2Wiki", "EM"), ("2Wiki", "F1")]
    assert table.attrs["footnotes"] == {"Self-RAG": "checkpoint not supplied"}


def test_ci_shown_on_request():
    t = side_by_side(OURS, load_paper_table("seakr_table1"), show_ci=True)
    assert t.loc["SEAKR", ("2Wiki", "F1")] == "33.0 [31.0, 35.1] | 36.0 | -3.0"
    assert t.loc["SEAKR", ("2Wiki", "EM")] == "27.5 | 30.2 | -2.7"  # no interval given


def test_rows_by_model_and_duplicate_guard():
    paper = load_paper_table("seakr_table4")
    ours = pd.DataFrame([{"model": "llama-3-8b-instruct", "dataset": "nq", "metric": "f1", "value": 40.0}])
    t = side_by_side(ours, paper, rows="model")
    assert t.loc["SEAKR (LLaMA-3 8B, instruct)", ("NQ", "F1")] == "40.0 | 43.0 | -3.0"
    with pytest.raises(UserError, match="several values"):
        side_by_side(ours.rename(columns={"model": "method"}).assign(method="seakr"), paper)


def test_markdown_golden(table):
    md = to_markdown(table, "Complex QA", differs_because="we run SmolLM2-135M on a Wikipedia excerpt")
    assert md.startswith("**Complex QA. Our numbers differ from the paper's because we run SmolLM2-135M"
                         " on a Wikipedia excerpt.**\n")
    assert "| Method | 2Wiki EM | 2Wiki F1 | HotpotQA EM |" in md
    assert "| SEAKR | 27.5 \\| 30.2 \\| -2.7 | 33.0 \\| 36.0 \\| -3.0 |" in md
    assert "| Self-RAG (a) | – \\| 4.6 \\| – |" in md
    assert "(a) Self-RAG: checkpoint not supplied" in md


def test_latex_golden(table):
    tex = to_latex(table, "Complex QA: 100% of 2Wiki & co", "tab:complex")
    assert r"\begin{tabular}{l rr rr rr}" in tex and r"\toprule" in tex and r"\bottomrule" in tex
    assert r" & \multicolumn{2}{c}{2Wiki} & \multicolumn{2}{c}{HotpotQA} & \multicolumn{2}{c}{IIRC} \\" in tex
    assert r"\cmidrule(lr){2-3} \cmidrule(lr){4-5} \cmidrule(lr){6-7}" in tex
    assert r"SEAKR & 27.5 \textbar{} 30.2 \textbar{} -2.7 & 33.0 \textbar{} 36.0 \textbar{} -3.0 &" in tex
    assert r"Self-RAG$^{a}$ & -- \textbar{} 4.6 \textbar{} --" in tex
    assert r"$^{a}$ Self-RAG: checkpoint not supplied" in tex
    assert r"\caption{Complex QA: 100\% of 2Wiki \& co.}" in tex and r"\label{tab:complex}" in tex
    assert "differ" not in tex  # only said when told so


def test_latex_escape_specials():
    assert latex_escape(r"a_b & 50% #1 $x$ {y} ~ ^ \ −") == (
        r"a\_b \& 50\% \#1 \$x\$ \{y\} \textasciitilde{} \textasciicircum{} \textbackslash{} $-$")


def test_save_table_writes_both_files(tmp_path, table):
    md, tex = save_table(table, "table1", tmp_path, caption="Complex QA")
    assert md == tmp_path / "table1.md" and tex == tmp_path / "table1.tex"
    assert "| SEAKR |" in md.read_text() and r"\label{tab:table1}" in tex.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table1.md", "table1.tex"]  # no temp files left


def test_missing_columns_is_user_error():
    with pytest.raises(UserError, match="our table lacks the column"):
        side_by_side(pd.DataFrame({"method": ["x"], "value": [1.0]}), load_paper_table("seakr_table1"))


def test_decimals_follow_the_paper_per_metric():
    ours = pd.DataFrame([{"method": "seakr", "dataset": "2wiki", "metric": "seconds_per_question",
                          "value": 5.123}])
    t = side_by_side(ours, load_paper_table("seakr_table7"))
    assert t.loc["SEAKR", ("2Wiki", "s/question")] == "5.12 | 4.94 | +0.18"
    assert t.loc["DRAGIN", ("HotpotQA", "s/question")] == "– | 19.25 | –"
    assert side_by_side(ours, load_paper_table("seakr_table7"), decimals=1).loc[
        "SEAKR", ("2Wiki", "s/question")] == "5.1 | 4.9 | +0.2"


def test_partial_rows_are_labelled_and_footnoted():
    wide = side_by_side(OURS, load_paper_table("seakr_table1"),
                        reasons={"self-rag": "checkpoint not supplied"},
                        partial={"seakr": "partial: 40 of 12,576 on 2Wiki"})
    assert "SEAKR (partial)" in wide.index and "SEAKR" not in wide.index
    assert wide.loc["SEAKR (partial)", ("2Wiki", "F1")] == "33.0 | 36.0 | -3.0"
    md = to_markdown(wide, "Table 1.")
    assert "| SEAKR (partial) (" in md and ": partial: 40 of 12,576 on 2Wiki" in md
    assert "checkpoint not supplied" in md       # the other footnotes stay
