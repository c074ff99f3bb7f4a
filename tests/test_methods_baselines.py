"""CoT, IRCoT, FLARE, DRAGIN and Self-RAG with scripted fakes (Self-RAG's behaviours: test_self_rag.py)."""
import math

import pytest

from fakes import FakeBackend, FakeSearcher, gen, hit
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.methods import build_method
from seakr_repro.methods.dragin import flagged_sentence
from seakr_repro.methods.flare import flare_query

Q = QuestionRecord(id="q1", question="Who directed the film Zorro Nights?", answers=["Ann Lee"])
DOCS = [hit("d1", "Zorro Nights was directed by Ann Lee."), hit("d2", "Ann Lee is a director."),
        hit("d3", "Other text.")]


def tail(p):
    return p.rsplit("Answer in the same format as before.", 1)[1]


def test_cot_never_retrieves_and_uses_final_mode():
    b, s = FakeBackend(lambda p, stop: "Ann Lee directed it. So the answer is Ann Lee."), FakeSearcher(DOCS)
    r = build_method("cot", b, s, "bundled-2wiki").run(Q)
    assert r.answer == "Ann Lee" and s.queries == [] and r.n_retrievals == 0
    assert len(b.generate_calls) == 1 and ". " not in b.generate_calls[0][1]
    assert b.generate_calls[0][0].count("Question:") == 11       # 10 demos + the question


def test_ircot_retrieves_every_step_with_question_then_step():
    def respond(p, stop):
        return "So the answer is Ann Lee." if "Lee directed it." in tail(p) else "Ann Lee directed it"
    b, s = FakeBackend(respond), FakeSearcher(DOCS)
    m = build_method("ircot", b, s, "bundled-hotpotqa")
    r = m.run(Q)
    assert s.queries == [Q.question, "Ann Lee directed it"]
    assert r.answer == "Ann Lee" and r.n_retrievals == 2
    assert m.settings["n_shot"] == 8 and m.settings["max_new_tokens"] == 100
    assert "Context: [1] Zorro Nights was directed by Ann Lee." in b.generate_calls[0][0]


def test_flare_trigger_and_masked_query():
    mean, query, flagged = flare_query([" Zorro", " was", " made", " by", " Tom"],
                                       [math.log(p) for p in (0.99, 0.99, 0.99, 0.99, 0.2)], 0.1)
    assert flagged == ["Tom"] and query == "Zorro was made by" and mean == pytest.approx(0.168)

    def respond(p, stop):
        if "Zorro Nights was directed by Ann Lee." in p:           # with retrieved context
            return "So the answer is Ann Lee." if "by Ann Lee." in tail(p) else "Zorro was made by Ann Lee"
        return gen("Zorro was made by Tom", probs=[0.99, 0.99, 0.99, 0.99, 0.2])
    b, s = FakeBackend(respond), FakeSearcher(DOCS)
    r = build_method("flare", b, s, "bundled-2wiki").run(Q)
    # the documents served step 1's regeneration only: step 2 starts without them, and the
    # uncertain step 2 retrieves again
    assert s.queries == ["Zorro was made by", "Zorro was made by"]
    assert r.trace[0]["regenerated"] == "Zorro was made by Ann Lee" and r.answer == "Ann Lee"
    # confident steps never retrieve
    b = FakeBackend(lambda p, stop: "So the answer is Ann Lee." if "Lee." in tail(p) else "Made by Ann Lee")
    s = FakeSearcher(DOCS)
    r = build_method("flare", b, s, "bundled-2wiki").run(Q)
    assert s.queries == [] and r.answer == "Ann Lee"


TEXT = "Zorro Nights was directed by Tom Hux"
ATT = [0.1, 0.1, 0.05, 0.1, 0.05, 0.5, 0.1]
ENT = [0.1, 0.1, 0.1, 0.2, 0.1, 2.0, 0.1]


def test_dragin_word_scores_flag_the_sentence():
    words = TEXT.split()
    before, sent, flags, scores = flagged_sentence(TEXT, words, ATT, ENT, 1.0, content_first=True)
    # Tom: attention 0.5 / 1.0 x entropy 2.0 x 7 words = 7.0
    assert scores[5] == pytest.approx(7.0) and scores[6] == pytest.approx(0.07)
    assert before == "" and sent == words and flags == [0, 0, 0, 0, 0, 1, 0]


def test_dragin_fixed_regenerates_the_step_with_the_attention_query():
    def respond(p, stop):
        if "Context:" in p:
            return "So the answer is Ann Lee." if "Lee." in tail(p) else "Zorro Nights was directed by Ann Lee"
        return gen(TEXT, attention=ATT, entropies=ENT)
    b, s = FakeBackend(respond), FakeSearcher(DOCS)
    m = build_method("dragin", b, s, "bundled-2wiki")
    r = m.run(Q)
    assert m.settings["threshold"] == 1.0 and m.settings["keep_top_k"] == 25
    assert r.trace[0]["flagged"] == ["Tom"]
    # the query: content words of question + steps + sentence (uniform fake attention: all tie),
    # minus the flagged word, in text order
    assert s.queries[0].split()[:3] == ["directed", "film", "Zorro"] and "Tom" not in s.queries[0].split()
    assert "Hux" in s.queries[0].split()
    assert r.answer == "Ann Lee"


def test_dragin_needs_attention():
    b, s = FakeBackend(lambda p, stop: "Zorro Nights was directed by Tom Hux"), FakeSearcher(DOCS)
    with pytest.raises(UserError):
        build_method("dragin", b, s, "bundled-2wiki").run(Q)


def test_self_rag_requires_checkpoint():
    with pytest.raises(DataMissingError, match="selfrag"):
        build_method("self_rag", FakeBackend(lambda p, s: ""), FakeSearcher(DOCS), "bundled-2wiki")


def test_unknown_method_and_setting():
    with pytest.raises(UserError):
        build_method("nope", None, None, "bundled-2wiki")
    with pytest.raises(UserError):
        build_method("cot", None, None, "bundled-2wiki", bogus=1)
