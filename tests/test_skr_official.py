"""SKR as THUNLP-MT/SKR's code does it (the `faithful` settings): skr.py's label scoring, knn.py's
margin vote and pooler embeddings, and its results files as training input."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fakes import FakeBackend, FakeSearcher, hit
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.data.records import QuestionRecord
from seakr_repro.methods.skr.labels import (
    DISCARDED,
    KNOWN,
    UNKNOWN,
    LabelledQuestion,
    answer_settings_from,
    build_skr_labels,
    official_answer,
    official_em,
)
from seakr_repro.methods.skr.method import MiniLMEncoder, build_skr, knn_vote, official_known
from seakr_repro.methods.skr.results_files import check_results_dir, labels_from_results

FIXTURE = Path(__file__).parent / "fixtures" / "skr"


# -- skr.py: the answer it scores ---------------------------------------------------------------
@pytest.mark.parametrize("output, gold, answer", [
    ("So the answer is Paris.", "Paris", " Paris."),                       # after "answer is"
    ("The answer is 8. Spiders are arachnids.", "8", " 8. Spiders are arachnids."),   # to the end
    ("answer is A, then the answer is B", "B", " A, then the answer is B"),  # the first one
    ("The final answer is: 100", "100", ": 100"),
    ("So the answer is\nAg.", "Au", "Ag."),                  # newlines deleted, not spaced
    ("The capital is Canberra, as they say.", "canberra", "canberra"),   # a sentence names the gold
    ("Gold comes from Latin aurum.\nIt is yellow.", "Au", "Au"),   # case-blind substring ("aurum")
    ("It was Washington. He led.", "George Washington", "It was Washington."),   # first sentence
    ("", "x", ""),
])
def test_official_answer(output, gold, answer):
    assert official_answer(output, gold) == answer


def test_official_em_reads_the_first_gold_and_matches_any():
    golds = ["George Washington", "Washington"]
    assert official_em("It was Washington. He led.", golds) == 0.0   # golds[0] is not named
    assert official_em("George Washington led the army.", golds) == 1.0
    assert official_em("So the answer is Washington", golds) == 1.0  # EM over every gold
    assert official_em("So the answer is eight.", ["8 ", "eight"]) == 1.0


# -- skr.py: labels from SKR's results files --------------------------------------------------
FIXTURE_OFFICIAL = [KNOWN, UNKNOWN, DISCARDED, DISCARDED, KNOWN, UNKNOWN, UNKNOWN, KNOWN]


def test_labels_from_results_as_skr_py():
    labels = labels_from_results(FIXTURE, ties="discard", label_answer="official")
    assert [x.label for x in labels] == FIXTURE_OFFICIAL      # skr.py's statuses on these files
    assert [x.id for x in labels] == [str(i) for i in range(8)]
    assert labels[1].question == "What is the capital of Australia?"
    # the paper's tie rule keeps the both-right question (2) as known; both wrong (3) stays out
    paper = labels_from_results(FIXTURE, ties="known", label_answer="official")
    assert [x.label for x in paper] == [*FIXTURE_OFFICIAL[:2], KNOWN, *FIXTURE_OFFICIAL[3:]]
    # the package's extractor finds no stated answer in "The capital is Canberra, ..."
    package = labels_from_results(FIXTURE, ties="known", label_answer="package")
    assert package[1].label == DISCARDED and package[5].label == KNOWN


def write_pair(tmp_path, cot, ir):
    (tmp_path / "cot_train.json").write_text(cot if isinstance(cot, str) else json.dumps(cot))
    (tmp_path / "cot_train_ir.json").write_text(ir if isinstance(ir, str) else json.dumps(ir))
    return tmp_path


ENTRY = {"Question": "Q?", "Gold answer": ["a"], "passages": [], "chain_of_thought_gpt3": "x"}


@pytest.mark.parametrize("cot, ir, names, says", [
    ([ENTRY], None, "cot_train_ir.json", "does not exist"),
    ("[{", [ENTRY], "cot_train.json", "is not JSON"),
    ([], [ENTRY], "cot_train.json", "an empty list"),
    ([{"Question": "Q?", "Gold answer": ["a"]}], [ENTRY], "cot_train.json", "chain_of_thought_gpt3"),
    ([{**ENTRY, "Gold answer": "a"}], [ENTRY], "cot_train.json", "not a non-empty list"),
    ([ENTRY, ENTRY], [ENTRY], "cot_train_ir.json", "has 2 questions"),
    ([ENTRY], [{**ENTRY, "Question": "Other?"}], "cot_train_ir.json", "differs"),
])
def test_results_files_errors_name_the_file(tmp_path, cot, ir, names, says):
    write_pair(tmp_path, cot, ir if ir is not None else [ENTRY])
    if ir is None:
        (tmp_path / "cot_train_ir.json").unlink()
    with pytest.raises(UserError) as err:
        labels_from_results(tmp_path)
    assert err.value.path.endswith(names) and says in str(err.value)
    assert err.value.setting == "skr.train_results" and err.value.fix


# -- knn.py: the vote --------------------------------------------------------------------------
@pytest.mark.parametrize("known, unknown, k, counts, is_known, margin", [
    # "ir worse" (known) the larger class: known needs known votes ahead by the margin
    (3, 2, 5, (47, 62, 740), True, 0),       # the code's own counts: int(15*5/849) = 0
    (2, 2, 4, (47, 62, 740), False, 0),      # a tie retrieves
    (3, 2, 5, (10, 90, 0), False, 4),        # int(80*5/100) = 4: one vote ahead is not enough
    (5, 0, 5, (10, 90, 0), True, 4),
    # "ir better" (unknown) the larger class, or equal: retrieve needs unknown votes ahead
    (2, 3, 5, (62, 47, 740), False, 0),
    (2, 2, 4, (62, 47, 740), True, 0),       # a tie does not retrieve
    (2, 3, 5, (90, 10, 0), True, 4),         # unknown ahead by 1 < 4: known
    (0, 5, 5, (90, 10, 0), False, 4),
    (2, 2, 4, (5, 5, 0), True, 0),           # equal classes take the second branch
    (1, 3, 4, (5, 5, 0), False, 0),
])
def test_official_known(known, unknown, k, counts, is_known, margin):
    assert official_known(known, unknown, k, counts) == (is_known, margin)


def unit(deg):
    return np.array([np.cos(np.radians(deg)), np.sin(np.radians(deg))])


TRAIN = np.stack([unit(0), unit(10), unit(20), unit(90)])


def test_knn_vote_official_counts_and_short_index():
    labels = [KNOWN, UNKNOWN, UNKNOWN, KNOWN]
    # counts default to the labels' own (2 unknown, 2 known, no discarded): a 1-1 tie at k=2 is known
    label, ev = knn_vote(unit(5), TRAIN, labels, k=2, rule="official")
    assert (label, ev["margin"], ev["train_counts"]) == (KNOWN, 0, [2, 2, 0])
    # the same votes with many more known questions in training (margin 0, first branch): retrieves
    assert knn_vote(unit(5), TRAIN, labels, k=2, rule="official", counts=(1, 3, 0))[0] == UNKNOWN
    # k beyond the index: faiss's empty slots read the LAST label (known), so 6 known of 8 votes
    label, ev = knn_vote(unit(5), TRAIN, labels, k=8, rule="official", counts=(2, 2, 0))
    assert ev["k"] == 8 and ev["known_votes"] == 6 and len(ev["neighbours"]) == 4
    assert knn_vote(unit(5), TRAIN, [KNOWN, UNKNOWN, KNOWN, UNKNOWN], k=8, rule="official")[1][
        "unknown_votes"] == 6


class DictEncoder:
    name = "dict-encoder"

    def __init__(self, vectors):
        self.vectors = vectors

    def encode(self, texts):
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def test_skr_knn_official_uses_every_training_label_in_the_margin():
    vectors = {"a?": unit(0), "b?": unit(10), "c?": unit(20), "d?": unit(90), "x?": unit(1),
               "query?": unit(5)}
    labelled = [LabelledQuestion("a", "a?", KNOWN), LabelledQuestion("b", "b?", KNOWN),
                LabelledQuestion("c", "c?", UNKNOWN), LabelledQuestion("d", "d?", UNKNOWN),
                *[LabelledQuestion(f"x{i}", "x?", DISCARDED) for i in range(20)]]
    docs = [hit("d1", "P one."), hit("d2", "P two."), hit("d3", "P three.")]

    def run(**settings):
        method = build_skr("skr-knn", FakeBackend(lambda p, s: "So the answer is A."), FakeSearcher(docs),
                           "bundled-hotpotqa", labelled=labelled, encoder=DictEncoder(vectors),
                           **settings)
        return method.run(QuestionRecord("q", "  query?  ", ["A"]))   # the query is stripped

    out = run(knn_k=3, knn_rule="official")
    ev = out.trace[0]
    # neighbours a, b, c: 2 known vs 1 unknown; counts (2, 2, 20) -> equal classes, margin 0: known
    assert ev["neighbours"] == ["a", "b", "c"] and ev["train_counts"] == [2, 2, 20]
    assert (out.extra["skr_label"], out.n_retrievals) == (KNOWN, 0)
    # the paper's rule on the same votes: 2/1 >= 2/2 -> known as well; majority too
    assert run(knn_k=3, knn_rule="paper").extra["skr_label"] == KNOWN
    with pytest.raises(UserError):
        run(knn_k=3, pooling="cls")


# -- knn.py: the pooler embeddings -------------------------------------------------------------
def test_pooler_encoder_is_the_normalised_bert_pooler_output():
    import torch
    from transformers import AutoModel, AutoTokenizer

    enc = MiniLMEncoder(pooling="pooler")
    texts = ["Who wrote Hamlet?", "What is the capital city of France, the country in Europe?"]
    got = enc.encode(texts)
    tok, model = AutoTokenizer.from_pretrained(str(enc._dir())), AutoModel.from_pretrained(str(enc._dir()))
    with torch.no_grad():
        want = model(**tok(texts[1:], return_tensors="pt")).pooler_output[0]
    want = (want / want.norm()).numpy()
    assert got.shape == (2, 384) and np.allclose(got[1], want, atol=1e-5)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(got, MiniLMEncoder().encode(texts), atol=1e-2)   # not the mean pooling
    # training questions are cut at 128 tokens, a test question is not
    long = "Who " + "really " * 200 + "wrote it?"
    assert not np.allclose(enc.encode([long])[0], enc.encode_query(long)[0], atol=1e-3)
    assert np.allclose(enc.encode(texts[:1])[0], enc.encode_query(texts[0])[0], atol=1e-5)
    with pytest.raises(UserError):
        MiniLMEncoder(pooling="cls")


# -- label construction with the model, scored as skr.py -------------------------------------
def test_build_skr_labels_official_scoring():
    def model(prompt, stop):
        # names the gold without "the answer is" closed-book; states a wrong answer with passages
        return "So the answer is Zed." if "Context:" in prompt else "Ann wrote it, I believe."
    docs = [hit("d1", "P one."), hit("d2", "P two."), hit("d3", "P three.")]
    rec = [QuestionRecord("a", "Who wrote Closed?", ["Ann"])]

    def label(**kw):
        return build_skr_labels(FakeBackend(model), FakeSearcher(docs), rec, "bundled-hotpotqa",
                                n_shot=1, **kw)[0]
    official = label(label_answer="official", ties="discard")
    assert (official.label, official.score_closed, official.score_retrieval) == (KNOWN, 1.0, 0.0)
    # the package's extractor takes the re-asked answer ("Zed") closed-book: both wrong
    assert label().label == DISCARDED
    with pytest.raises(UserError):
        label(label_answer="gold")


# -- profiles, notebook 10's step, preflight ---------------------------------------------------
def test_paper_profile_is_faithful_and_default_fixed():
    paper, default = load_config("paper"), load_config("default")
    assert [paper[f"skr.{k}"] for k in ("ties", "label_answer", "knn_rule", "pooling")] == \
        ["discard", "official", "official", "pooler"]
    assert [default[f"skr.{k}"] for k in ("ties", "label_answer", "knn_rule", "pooling")] == \
        ["known", "package", "paper", "mean"]
    with pytest.raises(UserError):
        load_config("default", {"skr.train_results.nosuch": "x"})
    with pytest.raises(UserError):
        load_config("default", {"skr.knn_rule": "vote"})


def test_notebook_10_reads_skr_results_files_and_settings(tmp_path):
    from seakr_repro.steps.seed_methods import skr_labels, skr_settings

    shutil.copytree(FIXTURE, tmp_path / "hp")
    cfg = load_config("paper", {"skr.train_results.bundled-hotpotqa": str(tmp_path / "hp")})
    labels, source, n = skr_labels(cfg, None, None, "bundled-hotpotqa", 3)   # no model needed
    assert [x.label for x in labels] == FIXTURE_OFFICIAL and n == 8 and "cot_train_ir.json" in source
    assert skr_settings(cfg, "skr-knn") == {"mode": "faithful", "knn_k": 5, "knn_rule": "official", "pooling": "pooler"}
    assert skr_settings(cfg, "skr-cls") == {"mode": "faithful", "pooling": "pooler"}
    assert skr_settings(cfg, "skr-icl") == skr_settings(cfg, "skr-prompt") == {"mode": "faithful"}


def test_preflight_checks_skr_results_files(tmp_path):
    from seakr_repro.runs.preflight import Report, check_skr_results

    assert check_results_dir(FIXTURE) == 8
    cfg = load_config("default", {"skr.train_results.bundled-hotpotqa": str(FIXTURE),
                                  "skr.train_results.bundled-2wiki": str(tmp_path)})
    report = Report()
    check_skr_results(cfg, report)
    assert any("bundled-hotpotqa" in x and "8 questions" in x for x in report.ok)
    assert len(report.problems) == 1 and "skr.train_results.bundled-2wiki" in report.problems[0]
    assert "cot_train.json does not exist" in report.problems[0]


def test_notebook_10_runs_skr_on_results_files_with_the_profiles_settings(tmp_path, monkeypatch):
    """skr.train_results gives bundled-hotpotqa its labels without a model call; the learned
    variants run with the profile's skr.* settings, and the labels are saved."""
    cfg = load_config("smoke", {"skr.train_results.bundled-hotpotqa": str(FIXTURE), "skr.knn_rule": "official",
                                "skr.pooling": "pooler", "skr.knn_k": 3, "skr.label_answer": "official"})
    specs, skipped, notes = seed_step(cfg, monkeypatch, tmp_path)
    knn = specs["skr-knn"].overrides
    assert (knn["knn_rule"], knn["pooling"], knn["knn_k"]) == ("official", "pooler", 3)
    assert [x.label for x in knn["labelled"]] == [*FIXTURE_OFFICIAL[:2], KNOWN, *FIXTURE_OFFICIAL[3:]]
    assert specs["skr-cls"].overrides["pooling"] == "pooler" and "pooling" not in specs["skr-icl"].overrides
    assert notes.loc[0, "train_questions"] == 8 and "cot_train.json" in notes.loc[0, "train_source"]
    assert (tmp_path / "smoke" / "10-seed-methods" / "skr_labels" / "bundled-hotpotqa.jsonl").is_file()
    assert set(skipped) == {"taikc-kbae"}


# -- the answer extraction: the profile's evaluation.answer_extraction, labels and answers alike --
SKR_VARIANTS = ("skr-prompt", "skr-icl", "skr-cls", "skr-knn")
DATED = "It was in 1963. So the answer is August 25, 1963."   # faithful: "august 25" (comma cut)


class LengthEncoder:
    """Two-dimensional vectors from a question's text: enough for the embedding variants to run
    without the MiniLM model."""

    name = "length-encoder"

    def encode(self, texts):
        return np.array([[len(t), 1.0 + sum(map(ord, t)) % 7] for t in texts], dtype=np.float32)


def seed_step(cfg, monkeypatch, tmp_path):
    """(the run specs notebook 10's step hands the grid for bundled-hotpotqa, what it skipped, its
    notes), labels from the fixture's results files, so no model call."""
    import pandas as pd

    import seakr_repro.methods.taikc.kbae as kbae
    from seakr_repro.steps import seed_methods

    specs = {}

    def fake_grid(cfg, pool, searcher, run_specs, datasets, n, table="", progress=True):
        specs.update({s.label: s for s in run_specs})
        return pd.DataFrame([{"method": s.label} for s in run_specs]), {}

    class Pool:
        def get(self, name=None):
            return FakeBackend(lambda p, s: pytest.fail("a model call while labels come from files"))

    monkeypatch.setattr(seed_methods, "results_dir", lambda p: tmp_path / p)
    monkeypatch.setattr(kbae, "kbae_unavailable", lambda backend: "no KBAE in this test")
    monkeypatch.setattr(seed_methods, "run_grid", fake_grid)
    _, skipped, notes = seed_methods.run_seed_methods(cfg, Pool(), None, ["bundled-hotpotqa"], 1, 4, 4, {},
                                                      progress=False)
    return specs, skipped, notes


@pytest.mark.parametrize("profile, mode, answer", [("paper", "faithful", "august 25"),
                                                   ("default", "fixed", "August 25, 1963")])
def test_every_skr_variant_extracts_answers_as_the_profile_says(tmp_path, monkeypatch, profile, mode, answer):
    """Each SKR variant, with the settings notebook 10 and the run grid give it, extracts its
    answer in the profile's evaluation.answer_extraction mode (SKR held "fixed" in every profile)."""
    from seakr_repro.methods import build_method
    from seakr_repro.runs.grid import method_settings

    cfg = load_config(profile, {"skr.train_results.bundled-hotpotqa": str(FIXTURE)})
    assert cfg["evaluation.answer_extraction"] == mode
    specs, _, _ = seed_step(cfg, monkeypatch, tmp_path)
    assert set(SKR_VARIANTS) <= set(specs)
    record = QuestionRecord("t", "When did it happen?", ["August 25, 1963"])
    for variant in SKR_VARIANTS:
        spec = specs[variant]
        settings = {**method_settings(cfg, spec.method, {}), **spec.overrides, "n_shot": 1}
        backend = FakeBackend(lambda p, s: "No." if p.endswith("A:") else DATED)
        extra = {"encoder": LengthEncoder()} if variant in ("skr-cls", "skr-knn") else {}
        method = build_method(spec.method, backend, FakeSearcher([hit("d1", "P.")]), "bundled-hotpotqa",
                              **settings, **extra)
        assert method.settings["mode"] == method.config["mode"] == mode, variant
        assert method.run(record).answer == answer, variant


@pytest.mark.parametrize("profile, closed", [("paper", "shakespeare"), ("default", "Shakespeare")])
def test_skr_labels_extract_answers_as_the_profile_says(profile, closed):
    """Labels scored by the package's extractor (`label_answer: package`) read the answers as the
    SKR variants will: from SKR's results files and from the model alike."""
    from seakr_repro.steps.seed_methods import skr_labels

    cfg = load_config(profile, {"skr.train_results.bundled-hotpotqa": str(FIXTURE),
                                "skr.label_answer": "package"})
    labels, _, _ = skr_labels(cfg, None, None, "bundled-hotpotqa", 3)
    assert labels[0].answer_closed == closed        # "... So the answer is Shakespeare."
    cfg = load_config(profile, {"skr.label_answer": "package"})
    rec = [QuestionRecord("a", "When?", ["August 25, 1963"])]
    model = FakeBackend(lambda p, s: DATED)
    labels = build_skr_labels(model, FakeSearcher([hit("d1", "P.")]), rec, "bundled-hotpotqa", n_shot=1,
                              label_answer="package", **answer_settings_from(cfg))
    assert labels[0].answer_closed == ("august 25" if profile == "paper" else "August 25, 1963")


def test_a_change_of_answer_extraction_makes_notebook_10_stale():
    """The step graph sees the setting: step 10 reads the evaluation section, and the SKR modules."""
    from seakr_repro import pipeline
    from seakr_repro import step_graph as graph
    from seakr_repro.artifacts import STEPS

    nb = pipeline.NOTEBOOKS_DIR / "10-seed-methods.ipynb"
    step = STEPS["10-seed-methods"]
    before = graph.step_inputs(nb, load_config("default").data, {}, {}, step)
    after = graph.step_inputs(nb, load_config("default", {"evaluation.answer_extraction": "faithful"}).data,
                              {}, {}, step)
    assert graph.reasons(before, after) == ["profile settings it reads changed: evaluation"]
    modules = {p.relative_to(graph.REPO_ROOT).as_posix() for p in graph.imported_modules(graph.code_cells(nb))}
    assert {"seakr_repro/methods/skr/labels.py", "seakr_repro/methods/skr/method.py"} <= modules
