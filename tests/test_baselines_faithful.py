"""The baselines in `baselines.mode: faithful`, i.e. as DRAGIN's code (src/generate.py, src/eval.py)
runs them, with the scripted backend; and DRAGIN's answer extraction."""
import pytest

from fakes import FakeBackend, FakeSearcher, fake_tokens, gen, hit
from seakr_repro.runs import grid
from seakr_repro.core.config import load_config
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import UserError
from seakr_repro.evaluation import dragin_answer, dragin_reasked, dragin_trim
from seakr_repro.methods import build_method

Q = QuestionRecord(id="q1", question="Who directed the film Zorro Nights?", answers=["Ann Lee"])
DOCS = [hit("d1", "Zorro Nights was directed by Ann Lee."), hit("d2", "Ann Lee is a director."),
        hit("d3", "Other text.")]
FAITHFUL = {"mode": "faithful"}
CASE = f"Question: {Q.question}\nAnswer:"


class Script:
    """Answers the generate calls in order; each item is a string or a Generation."""

    def __init__(self, *outputs):
        self.outputs = list(outputs)

    def __call__(self, prompt, stop):
        return self.outputs.pop(0)


def low(text, risky, p=0.2):
    """A Generation whose tokens containing a word of `risky` have probability p."""
    toks = fake_tokens(text)
    return gen(text, probs=[p if any(w in t for w in risky) else 0.99 for t in toks])


def scored(text, hot=(), att=0.9, ent=3.0):
    """A Generation for DRAGIN: the tokens containing a word of `hot` get high attention and
    entropy, the others little."""
    toks = fake_tokens(text)
    is_hot = [any(w == t.strip() for w in hot) for t in toks]
    return gen(text, attention=[att if h else 0.05 for h in is_hot],
               entropies=[ent if h else 0.05 for h in is_hot])


def test_generation_runs_in_chunks_without_stop_strings():
    b = FakeBackend(Script("Zorro Nights was directed by Ann Lee. So the answer is Ann Lee."))
    r = build_method("flare", b, FakeSearcher(DOCS), "bundled-2wiki", **FAITHFUL).run(Q)
    (prompt, stop), = b.generate_calls
    assert stop == [] and b.max_new_tokens == [64]               # DRAGIN's 2Wiki length
    # FLARE's prompt is case + " " + text, so the first ends in "Answer: " (DRAGIN's own skips it)
    assert prompt.endswith("\n" + CASE + " ") and prompt.count("Question:") == 7   # 6 demos + 1
    assert "So the answer is" in prompt.split(CASE)[0] and "Context" not in prompt
    assert r.answer == "Ann Lee" and r.n_retrievals == 0


def test_flares_documents_are_absent_from_the_next_steps_prompt():
    b = FakeBackend(Script(low("Zorro was made by Tom. It was released in 1999.", ["Tom"]),
                           "Zorro was made by Ann Lee. It was released in 1999.",
                           "So the answer is Ann Lee."))
    s = FakeSearcher(DOCS)
    r = build_method("flare", b, s, "bundled-2wiki", **FAITHFUL).run(Q)
    prompts = [p for p, _ in b.generate_calls]
    assert s.queries == ["Zorro was made by"]            # the flagged token " Tom." cut out
    assert "Context:\n[1] Zorro Nights was directed by Ann Lee.\n" in prompts[1]
    assert prompts[1].endswith(CASE + "  ")              # case + " " + text ("") + " " + before ("")
    # the next chunk sees the regenerated text but not the documents
    assert "Context" not in prompts[2] and DOCS[1].text not in prompts[2]
    assert prompts[2].endswith(CASE + "   Zorro was made by Ann Lee. It was released in 1999.")
    assert r.answer == "Ann Lee" and r.n_retrievals == 1


def test_a_3_word_sentence_is_not_skipped_in_faithful_mode():
    for method, first in (("flare", low("Tom made it.", ["Tom"])),
                          ("dragin", scored("Tom made it.", hot=["Tom"]))):
        b = FakeBackend(Script(first, "Ann Lee made it.", scored("So the answer is Ann Lee.")))
        s = FakeSearcher(DOCS)
        r = build_method(method, b, s, "bundled-2wiki", **FAITHFUL).run(Q)
        assert len(s.queries) == 1 and r.answer == "Ann Lee", method


def test_a_sentence_stating_the_answer_is_checked_too():
    b = FakeBackend(Script(low("So the answer is Tom Hux.", ["Tom", "Hux"]),
                           "So the answer is Ann Lee."))
    s = FakeSearcher(DOCS)
    r = build_method("flare", b, s, "bundled-2wiki", **FAITHFUL).run(Q)
    assert len(s.queries) == 1 and r.answer == "Ann Lee"


def test_dragin_retrieves_when_a_stop_word_exceeds_the_threshold():
    chunk = "Zorro Nights was directed by Tom Hux."
    # faithful: "by" (a preposition) crosses the threshold, which triggers retrieval; its flag is
    # then cleared, no flagged word is left, and the query's attention is 0/0: text order
    b = FakeBackend(Script(scored(chunk, hot=["by"]), "Zorro Nights was directed by Ann Lee. More.",
                           scored("So the answer is Ann Lee.")))
    s = FakeSearcher(DOCS)
    r = build_method("dragin", b, s, "bundled-2wiki", keep_top_k=4, **FAITHFUL).run(Q)
    # "by": attention share 0.9 / 1.2 x entropy 3.0 x 7 words = 15.75 > 1.0
    assert r.trace[0]["flagged"] == [] and ["by", 15.75] in r.trace[0]["scores"]
    assert s.queries == ["directed film Zorro Nights?"]
    assert b.attention_calls == []                       # nothing flagged: no rows to read
    # the regeneration keeps its first sentence only
    assert r.extra["text"].startswith("Zorro Nights was directed by Ann Lee. So the answer")
    assert r.answer == "Ann Lee"
    # fixed (the paper's definition): only content words can trigger
    b = FakeBackend(lambda p, stop: scored(chunk, hot=["by"]) if "Hux" not in p
                    else scored("So the answer is Tom Hux."))
    s = FakeSearcher(DOCS)
    build_method("dragin", b, s, "bundled-2wiki").run(Q)
    assert s.queries == []


def test_dragins_query_is_the_top_keep_k_words_by_attention_over_question_previous_text_and_sentence():
    chunk = "Zorro Nights was directed by Ann Lee. Its star was Tom Hux."

    def attend(tokens, pos):
        weight = {"Lee.": 5.0, "Nights?": 4.0}
        row = [weight.get(t.strip(), 1.0) if j <= pos else 0.0 for j, t in enumerate(tokens)]
        return [v / sum(row) for v in row]

    b = FakeBackend(Script(scored(chunk, hot=["Tom"]), "Its star was Bo Day.",
                           scored("So the answer is Ann Lee.")), attend=attend)
    s = FakeSearcher(DOCS)
    r = build_method("dragin", b, s, "bundled-2wiki", keep_top_k=2, **FAITHFUL).run(Q)
    (tokens, positions), = b.attention_calls
    # the sequence is question + text so far ("") + the sentences before + the flagged sentence
    text = "".join(tokens)
    assert text == Q.question + "  Zorro Nights was directed by Ann Lee. Its star was Tom Hux."
    tom = [t.strip() for t in tokens].index("Tom")
    assert positions == [tom - 1]                        # the position that predicts "Tom"
    assert r.trace[0]["flagged"] == ["Tom"]
    assert s.queries == ["Nights? Lee."]                 # top-2 by attention, in text order
    # the kept sentence, then the regeneration's first sentence
    assert r.extra["text"].startswith("Zorro Nights was directed by Ann Lee. Its star was Bo Day.")


def test_dragin_faithful_needs_attention():
    b = FakeBackend(Script("Zorro Nights was directed by Tom Hux."))
    with pytest.raises(UserError):
        build_method("dragin", b, FakeSearcher(DOCS), "bundled-2wiki", **FAITHFUL).run(Q)


def test_baselines_extract_the_answer_after_the_first_the_answer_is():
    text = "Ann Lee directed it. So the answer is August 25, 1963. So the answer is Bob."
    assert dragin_answer(text, "hotpotqa") == "August 25, 1963. So the answer is Bob"
    assert dragin_answer("So the answer is 42.\n", "iirc") == "42"
    assert dragin_answer("So the answer is 42.\n", "hotpotqa") == "42.\n"
    assert dragin_answer("The answer is 42.", "hotpotqa") == ""          # case-sensitive cue
    assert dragin_answer("Ann Lee directed it.", "2wiki") == "Ann Lee directed it."
    assert dragin_trim("Ann. So the answer is X.\n\nQuestion: Who? Note: y") == "Ann. So the answer is X.\n\n"
    assert dragin_trim("Question: q") == "Question: q"                    # not at the start
    # through a method: the chunk's continuation into a new demo is cut, the comma kept
    b = FakeBackend(Script("So the answer is Ann Lee, a director.\n\nQuestion: Who is Bo?\nAnswer: Bo"))
    r = build_method("cot", b, FakeSearcher(DOCS), "bundled-hotpotqa", **FAITHFUL).run(Q)
    assert r.answer == "Ann Lee, a director.\n\n" and len(b.generate_calls) == 1


def test_a_missing_answer_is_re_asked_with_20_tokens():
    b = FakeBackend(Script("Zorro Nights was directed by Ann Lee.", "Ann Lee.\nQuestion: next"))
    r = build_method("cot", b, FakeSearcher(DOCS), "iirc", **FAITHFUL).run(Q)
    (first, _), (again, stop) = b.generate_calls
    assert b.max_new_tokens == [128, 20] and stop == []
    assert again == first + " Zorro Nights was directed by Ann Lee. So the answer is "
    assert r.answer == "Ann Lee"
    assert dragin_reasked("X", " Y.\nQuestion: z") == "X So the answer is Y.\n"


def test_ircot_faithful_is_fix_sentence_retrieval():
    s = FakeSearcher(DOCS, results=lambda q: [hit("q" + str(len(q)), f"doc for {q}")])
    b = FakeBackend(Script("Zorro Nights was directed by Ann Lee. Ann Lee is a director.",
                           "So the answer is Ann Lee. Extra."))
    r = build_method("ircot", b, s, "bundled-2wiki", **FAITHFUL).run(Q)
    assert s.queries == [Q.question, "Zorro Nights was directed by Ann Lee."]
    p1, p2 = (p for p, _ in b.generate_calls)
    assert "Answer in t he same format as before.\n" + CASE in p1
    assert f"doc for {Q.question}" in p1 and f"doc for {Q.question}" not in p2   # not accumulated
    assert p2.endswith(CASE + "  Zorro Nights was directed by Ann Lee.")        # first sentence only
    assert r.answer == "Ann Lee" and r.n_retrievals == 2


def test_baselines_mode_reaches_the_methods():
    assert grid.method_settings(load_config("paper"), "dragin", {})["mode"] == "faithful"
    s = grid.method_settings(load_config("default"), "flare", {})
    assert s["mode"] == "fixed" and s["answer_extraction"] == "fixed"
    with pytest.raises(UserError, match="baselines.mode"):
        build_method("flare", FakeBackend(Script()), FakeSearcher(DOCS), "bundled-2wiki", mode="x")
