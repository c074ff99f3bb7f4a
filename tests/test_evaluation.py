"""EM/F1 on hand-computed cases, answer extraction in both modes, bootstrap behaviour."""
import numpy as np
import pytest

from seakr_repro.core.errors import UserError
from seakr_repro.evaluation import (
    answer_from_forced,
    bootstrap_ci,
    exact_match,
    extract_answer,
    f1_score,
    normalize_answer,
    paired_bootstrap,
    score_predictions,
)


# --- normalisation and metrics ---------------------------------------------------------------

def test_normalize_answer_squad_rules():
    assert normalize_answer("  The  Eiffel-Tower, in PARIS! ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("Theory") == "theory"  # "the" only as a whole word
    assert normalize_answer(None) == ""


def test_exact_match_uses_aliases_articles_and_punctuation():
    assert exact_match("the United States.", ["USA", "United States"]) == 1.0
    assert exact_match("United States of America", ["USA", "United States"]) == 0.0
    assert exact_match(None, ["x"]) == 0.0
    assert exact_match("Paris", "paris") == 1.0  # a bare string is one gold, not its characters


def test_f1_hand_computed():
    # pred tokens {barack, obama, jr}, gold {barack, obama}: P = 2/3, R = 1, F1 = 0.8
    assert f1_score("Barack Obama Jr.", ["Barack Obama"]) == pytest.approx(0.8)
    # max over golds: second alias overlaps fully
    assert f1_score("Obama", ["Barack Obama", "Obama"]) == pytest.approx(1.0)
    # repeated tokens count by multiplicity: pred "new new york" vs gold "new york": P=2/3, R=1
    assert f1_score("new new york", ["New York"]) == pytest.approx(0.8)
    assert f1_score("", ["x"]) == 0.0


def test_f1_yes_no_rule():
    assert f1_score("no", ["no, he was not"]) == 0.0   # would be 0.4 without the rule
    assert f1_score("no he was not", ["no"]) == 0.0
    assert f1_score("No.", ["no"]) == 1.0
    assert f1_score("noanswer", ["no answer"]) == 0.0


def test_scores_stay_in_unit_interval():
    rng = np.random.default_rng(1)
    words = ["a", "the", "paris", "france", "yes", "no", "1963", "august"]
    for _ in range(200):
        pred = " ".join(rng.choice(words, rng.integers(0, 5)))
        golds = [" ".join(rng.choice(words, rng.integers(1, 4))) for _ in range(2)]
        assert 0.0 <= f1_score(pred, golds) <= 1.0
        assert exact_match(pred, golds) <= f1_score(pred, golds) or normalize_answer(pred) == ""


def test_empty_golds_is_a_user_error():
    with pytest.raises(UserError, match="no gold answer"):
        exact_match("x", [])
    with pytest.raises(UserError):
        f1_score("x", [None])


def test_score_predictions_percent_and_length_check():
    out = score_predictions(["Paris", "Lyon", None, "Rome"], [["Paris"], ["Marseille"], ["x"], ["rome"]],
                            n_boot=200)
    assert out["n"] == 4
    assert out["em"] == pytest.approx(50.0) and out["f1"] == pytest.approx(50.0)
    assert out["em_low"] <= out["em"] <= out["em_high"]
    with pytest.raises(UserError, match="2 predictions but 1"):
        score_predictions(["a", "b"], [["a"]])


# --- answer extraction -----------------------------------------------------------------------

DATE = "Edward L. Cahn died on August 25, 1963. So the answer is August 25, 1963."


def test_faithful_truncates_at_first_comma_or_period():
    assert extract_answer(DATE, "faithful") == "august 25"
    assert extract_answer("So the answer is The Operation M.D..", "faithful") == "the operation m"
    assert extract_answer("So the answer is 15,140.", "faithful") == "15"


def test_fixed_keeps_case_commas_and_abbreviations():
    assert extract_answer(DATE, "fixed") == "August 25, 1963"
    assert extract_answer("So the answer is The Operation M.D..", "fixed") == "The Operation M.D."
    assert extract_answer("So the answer is Hurricane No. 1.", "fixed") == "Hurricane No. 1"
    assert extract_answer("So the answer is 3.5 million.\nQuestion: next", "fixed") == "3.5 million"
    assert extract_answer("So the answer is \"Walls and Bridges\".", "fixed") == "Walls and Bridges"


def test_multiple_occurrences_first_vs_last():
    text = "The answer is Paris. Wait, so the answer is Lyon."
    assert extract_answer(text, "faithful") == "paris"
    assert extract_answer(text, "fixed") == "Lyon"
    # fixed skips a trailing cue with nothing after it
    assert extract_answer("So the answer is Rome. Therefore the answer is", "fixed") == "Rome"


def test_no_occurrence_and_unterminated_answer():
    assert extract_answer("I do not know.", "faithful") is None
    assert extract_answer("I do not know.", "fixed") is None
    assert extract_answer("", "fixed") is None and extract_answer(None, "faithful") is None
    # faithful needs a comma or period after the answer; fixed runs to the end of the text
    assert extract_answer("So the answer is Rome", "faithful") is None
    assert extract_answer("So the answer is Rome", "fixed") == "Rome"


def test_is_the_answer_pattern():
    assert extract_answer("He was born there. Rome is the answer.", "faithful") == "rome"
    assert extract_answer("He was born there. Rome is the answer.", "fixed") == "Rome"
    assert extract_answer("Rome is the answer", "faithful") is None  # needs a preceding . ? !
    assert extract_answer("Rome is the answer", "fixed") == "Rome"


def test_forced_answer_and_bad_mode():
    assert answer_from_forced("Rome. It is", "faithful") == "Rome. It is"
    assert answer_from_forced(" Rome. It is", "fixed") == "Rome"
    with pytest.raises(UserError, match="unknown answer extraction mode"):
        extract_answer("x", "strict")


# --- bootstrap -------------------------------------------------------------------------------

def test_bootstrap_deterministic_and_ordered():
    scores = np.random.default_rng(0).integers(0, 2, 300).astype(float)
    a = bootstrap_ci(scores, n_boot=500, seed=3)
    assert a == bootstrap_ci(scores, n_boot=500, seed=3)
    assert a != bootstrap_ci(scores, n_boot=500, seed=4)
    assert a.low < a.mean < a.high and a.mean == pytest.approx(scores.mean())
    assert bootstrap_ci([0.7], n_boot=50) == (0.7, 0.7, 0.7)


def test_bootstrap_width_matches_normal_theory():
    # Bernoulli(0.3), n = 2000: the 95% half-width should be about 1.96*sqrt(.21/2000) = 0.020.
    scores = np.random.default_rng(5).random(2000) < 0.3
    mean, low, high = bootstrap_ci(scores, n_boot=2000, seed=0)
    assert (high - low) / 2 == pytest.approx(1.96 * np.sqrt(mean * (1 - mean) / 2000), rel=0.15)


def test_bootstrap_coverage_sanity():
    # Over many data sets drawn from a known mean, the 90% interval should cover it ~90% of the time.
    rng = np.random.default_rng(11)
    hits = sum(low <= 0.4 <= high
               for _, low, high in (bootstrap_ci(rng.random(200) < 0.4, n_boot=300, confidence=0.9, seed=i)
                                    for i in range(150)))
    assert 0.80 <= hits / 150 <= 0.97


def test_bootstrap_rejects_bad_input():
    with pytest.raises(UserError, match="no scores"):
        bootstrap_ci([])
    with pytest.raises(UserError, match="NaN"):
        bootstrap_ci([0.1, float("nan")])
    with pytest.raises(UserError, match="confidence"):
        bootstrap_ci([1, 0], confidence=95)


def test_paired_bootstrap_sees_consistent_gain():
    rng = np.random.default_rng(2)
    b = (rng.random(500) < 0.3).astype(float)
    a = np.maximum(b, rng.random(500) < 0.1)  # a is never worse, sometimes better
    res = paired_bootstrap(a, b, n_boot=1000, seed=0)
    assert res.diff == pytest.approx(a.mean() - b.mean())
    assert 0 < res.low <= res.diff <= res.high and res.p_value < 0.01
    same = paired_bootstrap(b, b, n_boot=200)
    assert (same.diff, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(UserError, match="same questions"):
        paired_bootstrap(a, b[:-1])
