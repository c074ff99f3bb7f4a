"""SKR: label construction (Eq. 4), the four self-knowledge strategies, adaptive retrieval."""
import numpy as np
import pytest

from fakes import FakeBackend, FakeSearcher, hit
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import UserError
from seakr_repro.methods.skr.method import (
    SAYS_NO,
    SAYS_YES,
    LinearProbe,
    build_skr,
    knn_vote,
    need_prompt,
    parse_need,
)
from seakr_repro.methods.skr.labels import (
    DISCARDED,
    KNOWN,
    UNKNOWN,
    LabelledQuestion,
    build_skr_labels,
    label_from_scores,
    load_labels,
    save_labels,
)

DOCS = [hit("d1", "Passage one."), hit("d2", "Passage two."), hit("d3", "Passage three."),
        hit("d4", "Passage four.")]


def asked(prompt):
    """The question of the final "Question: ...\nAnswer: " block of a CoT prompt."""
    return prompt.rsplit("Question: ", 1)[1].split("\n", 1)[0]


class DictEncoder:
    """Fixed vectors per question text, so the neighbours of a test question are known."""

    name = "dict-encoder"

    def __init__(self, vectors):
        self.vectors, self.calls = vectors, 0

    def encode(self, texts):
        self.calls += 1
        return np.array([self.vectors[t] for t in texts], dtype=np.float32)


def lq(i, label, question=None):
    return LabelledQuestion(id=i, question=question or f"question {i}?", label=label)


# -- step 1: labels ---------------------------------------------------------------------------
@pytest.mark.parametrize("closed, retrieval, ties, label", [
    (1.0, 0.0, "known", KNOWN),         # right only without retrieval
    (0.0, 1.0, "known", UNKNOWN),       # right only with retrieval
    (1.0, 1.0, "known", KNOWN),         # tie, both right: the paper's ">=" keeps it in D+
    (1.0, 1.0, "discard", DISCARDED),   # the official code drops every tie
    (0.0, 0.0, "known", DISCARDED),     # both wrong: discarded (paper and code)
    (0.4, 0.8, "known", UNKNOWN),       # F1-style partial scores compare as numbers
    (0.8, 0.8, "known", KNOWN),
])
def test_label_from_scores(closed, retrieval, ties, label):
    assert label_from_scores(closed, retrieval, ties) == label


def test_label_rule_rejects_unknown_tie_policy():
    with pytest.raises(UserError):
        label_from_scores(1.0, 0.0, "coin")


TRAIN = [QuestionRecord("closed", "Who wrote Closed?", ["Ann"]),
         QuestionRecord("open", "Who wrote Open?", ["Bob"]),
         QuestionRecord("both", "Who wrote Both?", ["Cy"]),
         QuestionRecord("none", "Who wrote None?", ["Dee"]),
         QuestionRecord("forced", "Who wrote Forced?", ["Eve"])]


def training_model(prompt, stop):
    """Right/wrong per question and per context, as the label cases need."""
    if prompt.endswith(" So the answer is "):       # forced answer after a CoT without one
        return "Eve."
    q, ctx = asked(prompt), "Context:" in prompt
    right = {"Who wrote Closed?": not ctx, "Who wrote Open?": ctx, "Who wrote Both?": True,
             "Who wrote None?": False}
    if q == "Who wrote Forced?":
        return "It was written long ago." if ctx else "So the answer is Zed."
    gold = {"Who wrote Closed?": "Ann", "Who wrote Open?": "Bob", "Who wrote Both?": "Cy",
            "Who wrote None?": "Dee"}[q]
    return f"So the answer is {gold if right[q] else 'Nobody'}."


def test_build_skr_labels_compares_answers_with_and_without_retrieval(tmp_path):
    backend, searcher = FakeBackend(training_model), FakeSearcher(DOCS)
    labels = build_skr_labels(backend, searcher, TRAIN, "bundled-hotpotqa", n_shot=2)
    by_id = {x.id: x for x in labels}
    assert {i: x.label for i, x in by_id.items()} == {
        "closed": KNOWN, "open": UNKNOWN, "both": KNOWN, "none": DISCARDED, "forced": UNKNOWN}
    assert (by_id["closed"].answer_closed, by_id["closed"].answer_retrieval) == ("Ann", "Nobody")
    assert (by_id["open"].score_closed, by_id["open"].score_retrieval) == (0.0, 1.0)
    assert by_id["forced"].answer_retrieval == "Eve"          # the forced-answer fallback
    assert by_id["open"].retrieved == ["d1", "d2", "d3"]      # top-3 passages, the paper's k
    assert searcher.queries == [r.question for r in TRAIN]    # the question is the query
    # two CoT calls per question (+1 forced), the paper's 4-demo default overridden to 2
    assert len(backend.generate_calls) == 2 * len(TRAIN) + 1
    assert backend.generate_calls[0][0].count("Question: ") == 3
    # ties="discard" (official code) drops the both-correct question
    tie = build_skr_labels(FakeBackend(training_model), FakeSearcher(DOCS), TRAIN[2:3],
                           "bundled-hotpotqa", ties="discard")
    assert tie[0].label == DISCARDED
    # saved and loaded as JSONL, unchanged
    save_labels(tmp_path / "labels.jsonl", labels)
    assert load_labels(tmp_path / "labels.jsonl") == labels


def test_build_skr_labels_rejects_unknown_settings():
    with pytest.raises(UserError):
        build_skr_labels(FakeBackend(training_model), FakeSearcher(DOCS), TRAIN, "bundled-hotpotqa",
                         top_k=5)
    with pytest.raises(UserError):
        build_skr_labels(FakeBackend(training_model), FakeSearcher(DOCS), TRAIN, "bundled-hotpotqa",
                         metric="bleu")


def test_load_labels_rejects_a_bad_label(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "question": "q?", "label": "maybe"}\n')
    with pytest.raises(UserError):
        load_labels(path)


# -- step 2: strategies -----------------------------------------------------------------------
@pytest.mark.parametrize("reply, needs", [
    (SAYS_YES, True), (SAYS_NO, False), ("  yes.", True), ("No.", False),
    ("I don't need any additional information.", False),
    ("I don\u2019t need more.", False),
    ("Additional information is not needed.", False),
    ("I need to look this up.", True),
    ("The answer is Paris.", None), ("", None), ("Nobody knows.", None),
])
def test_parse_need(reply, needs):
    assert parse_need(reply) is needs


def test_need_prompt_uses_the_paper_template_and_labelled_demos():
    assert need_prompt("Who is X?") == (
        "Who is X?\nQ: Do you need additional information to answer this question?\nA:")
    text = need_prompt("Who is X?", [lq("a", KNOWN, "Q plus?"), lq("b", UNKNOWN, "Q minus?")])
    blocks = text.split("\n\n")
    assert blocks[0].startswith("Q plus?\n") and blocks[0].endswith(SAYS_NO)
    assert blocks[1].startswith("Q minus?\n") and blocks[1].endswith(SAYS_YES)
    assert blocks[2].endswith("\nA:")


def unit(deg):
    return np.array([np.cos(np.radians(deg)), np.sin(np.radians(deg))])


# six training questions on the unit circle; the query at 0 degrees
KNN_TRAIN = np.stack([unit(10), unit(-20) * 5.0, unit(30), unit(90), unit(120), unit(180)])


def test_knn_vote_takes_the_cosine_nearest_and_the_paper_prior_ratio():
    # m = 4 known, n = 2 unknown; neighbours by cosine (the x5 norm of row 1 does not matter)
    labels = [KNOWN, UNKNOWN, KNOWN, KNOWN, UNKNOWN, KNOWN]
    label, ev = knn_vote(unit(0), KNN_TRAIN, labels, k=3)
    assert ev["neighbours"] == [0, 1, 2]
    # l = 2 of k = 3: 2/1 >= 4/2 -> known (equality of the ratios counts as known)
    assert (label, ev["known_votes"], ev["train_known"], ev["train_unknown"]) == (KNOWN, 2, 4, 2)
    # l = 1 of 3 with the same prior: 1/2 < 4/2 -> unknown
    label, ev = knn_vote(unit(0), KNN_TRAIN, [UNKNOWN, UNKNOWN, KNOWN, KNOWN, KNOWN, KNOWN], k=3)
    assert (label, ev["known_votes"]) == (UNKNOWN, 1)
    # a prior favouring "unknown" (m=1, n=5): one known vote of 3 is enough (1/2 >= 1/5)
    label, _ = knn_vote(unit(0), KNN_TRAIN, [KNOWN] + [UNKNOWN] * 5, k=3)
    assert label == KNOWN


def test_knn_vote_ties():
    labels = [KNOWN, UNKNOWN, UNKNOWN, KNOWN, KNOWN, UNKNOWN]       # m = n = 3
    # a 2-2 tie among 4 neighbours: the paper's ">=" says known, plain majority retrieves
    assert knn_vote(unit(0), KNN_TRAIN, labels, k=4)[0] == KNOWN
    assert knn_vote(unit(0), KNN_TRAIN, labels, k=4, rule="majority")[0] == UNKNOWN
    # equal similarities: training order decides, deterministically
    same = np.stack([unit(5), unit(-5), unit(90)])
    assert knn_vote(unit(0), same, [UNKNOWN, KNOWN, KNOWN], k=1)[1]["neighbours"] == [0]
    # k larger than the training set is clamped; one class only -> that class
    label, ev = knn_vote(unit(0), KNN_TRAIN[:2], [UNKNOWN, UNKNOWN], k=10)
    assert (label, ev["k"]) == (UNKNOWN, 2)
    assert knn_vote(unit(0), KNN_TRAIN[:2], [KNOWN, KNOWN], k=1)[0] == KNOWN
    with pytest.raises(UserError):
        knn_vote(unit(0), KNN_TRAIN, labels, k=3, rule="weighted")


def test_linear_probe_separates_toy_embeddings():
    rng = np.random.default_rng(0)
    known = rng.normal(size=(20, 8)) * 0.1 + np.eye(8)[0]
    unknown = rng.normal(size=(20, 8)) * 0.1 + np.eye(8)[1]
    probe = LinearProbe(np.vstack([known, unknown]), [KNOWN] * 20 + [UNKNOWN] * 20)
    assert probe.p_known(np.eye(8)[0] + 0.05) > 0.5 > probe.p_known(np.eye(8)[1] + 0.05)
    assert LinearProbe(known, [UNKNOWN] * 20).p_known(np.eye(8)[0]) == 0.0
    with pytest.raises(UserError):
        LinearProbe(np.zeros((0, 8)), [])


# -- step 3: adaptive retrieval -----------------------------------------------------------------
LABELLED = [lq("k1", KNOWN, "Known one?"), lq("k2", KNOWN, "Known two?"),
            lq("u1", UNKNOWN, "Unknown one?"), lq("u2", UNKNOWN, "Unknown two?"),
            lq("x", DISCARDED, "Dropped?")]
VECTORS = {"Known one?": unit(0), "Known two?": unit(10), "Unknown one?": unit(90),
           "Unknown two?": unit(100), "Dropped?": unit(5),
           "Like the known ones?": unit(4), "Like the unknown ones?": unit(95)}
TEST_KNOWN = QuestionRecord("t1", "Like the known ones?", ["Ann"])
TEST_UNKNOWN = QuestionRecord("t2", "Like the unknown ones?", ["Bob"])


def answering_model(need_reply="No."):
    def respond(prompt, stop):
        if prompt.endswith("A:"):                      # the self-knowledge question
            return need_reply(prompt) if callable(need_reply) else need_reply
        return "Passages say Bob. So the answer is Bob." if "Context:" in prompt else "So the answer is Ann."
    return respond


def make(variant, need_reply="No.", labelled=LABELLED, **settings):
    backend, searcher = FakeBackend(answering_model(need_reply)), FakeSearcher(DOCS)
    settings.setdefault("n_shot", 1)
    method = build_skr(variant, backend, searcher, "bundled-hotpotqa", labelled=labelled,
                       encoder=DictEncoder(VECTORS), **settings)
    return method, backend, searcher


@pytest.mark.parametrize("variant", ["skr-knn", "skr-cls"])
def test_embedding_variants_retrieve_exactly_when_the_label_is_unknown(variant):
    method, backend, searcher = make(variant, knn_k=2) if variant == "skr-knn" else make(variant)
    known = method.run(TEST_KNOWN)
    assert (known.extra["skr_label"], known.n_retrievals, known.answer) == (KNOWN, 0, "Ann")
    assert searcher.queries == [] and "Context:" not in backend.generate_calls[-1][0]
    unknown = method.run(TEST_UNKNOWN)
    assert (unknown.extra["skr_label"], unknown.n_retrievals, unknown.answer) == (UNKNOWN, 1, "Bob")
    assert searcher.queries == [TEST_UNKNOWN.question]
    context = "Context: [1] Passage one.\n[2] Passage two.\n[3] Passage three.\n"
    assert context in backend.generate_calls[-1][0]
    assert [t["kind"] for t in unknown.trace] == ["self_knowledge", "retrieve", "answer_with_retrieval"]
    assert len(backend.generate_calls) == 2                   # no LLM call to decide
    if variant == "skr-knn":                                  # discarded questions are not neighbours
        assert known.trace[0]["neighbours"] == ["k1", "k2"]
        assert unknown.trace[0]["neighbours"] == ["u1", "u2"]
    else:
        assert known.trace[0]["p_known"] > 0.5 > unknown.trace[0]["p_known"]


@pytest.mark.parametrize("reply, retrieves", [(SAYS_NO, False), (SAYS_YES, True), ("Paris.", True)])
def test_skr_prompt_follows_the_models_reply(reply, retrieves):
    method, backend, searcher = make("skr-prompt", reply, labelled=None)
    out = method.run(TEST_KNOWN)
    assert out.n_retrievals == int(retrieves) and len(searcher.queries) == int(retrieves)
    assert backend.generate_calls[0][0] == need_prompt(TEST_KNOWN.question)
    assert out.trace[0]["output"] == reply and out.trace[0]["retrieve"] is retrieves
    assert out.trace[0]["kind"] == "self_knowledge" and out.trace[0]["prompt_chars"] > 0
    assert out.answer == ("Bob" if retrieves else "Ann")


def test_skr_icl_shows_labelled_questions_and_follows_the_reply():
    method, backend, searcher = make("skr-icl", SAYS_YES, icl_per_class=1)
    out = method.run(TEST_KNOWN)
    prompt = backend.generate_calls[0][0]
    blocks = prompt.split("\n\n")
    assert len(blocks) == 3 and blocks[0].endswith(SAYS_NO) and blocks[1].endswith(SAYS_YES)
    assert blocks[0].split("\n")[0] in ("Known one?", "Known two?")
    assert blocks[1].split("\n")[0] in ("Unknown one?", "Unknown two?")
    assert "Dropped?" not in prompt
    assert out.n_retrievals == 1 and out.trace[0]["demo_ids"] == [d.id for d in method.prompt_demos()]
    # the same seed draws the same demonstrations
    assert make("skr-icl", icl_per_class=1)[0].prompt_demos() == method.prompt_demos()


def test_build_skr_errors_and_config():
    with pytest.raises(UserError):
        make("skr-magic")
    with pytest.raises(UserError):                            # labels needed, none usable
        make("skr-knn", labelled=[lq("x", DISCARDED, "Dropped?")])
    with pytest.raises(UserError):
        make("skr-knn", cls_C=2.0)                            # a setting of another variant
    a, b = make("knn")[0], make("skr-knn", labelled=LABELLED[:3])[0]
    assert a.name == "skr-knn" and a.config["encoder"] == "dict-encoder"
    assert a.config["labels"]["known"] == 2 and a.config["labels"]["sha"] != b.config["labels"]["sha"]
    assert "labels" not in make("skr-prompt", labelled=None)[0].config


def test_real_minilm_encoder_finds_the_paraphrase():
    from seakr_repro.methods.skr.method import MiniLMEncoder
    labelled = [lq("hamlet", UNKNOWN, "Who wrote the play Hamlet?"),
                lq("paris", KNOWN, "What is the capital city of France?"),
                lq("water", KNOWN, "At what temperature does water boil?")]
    method = build_skr("skr-knn", FakeBackend(answering_model()), FakeSearcher(DOCS),
                       "bundled-hotpotqa", labelled=labelled, encoder=MiniLMEncoder(), knn_k=1)
    out = method.run(QuestionRecord("t", "Who is the author of Hamlet?", ["Shakespeare"]))
    assert out.trace[0]["neighbours"] == ["hamlet"] and out.n_retrievals == 1
    assert out.trace[0]["similarities"][0] > 0.7
