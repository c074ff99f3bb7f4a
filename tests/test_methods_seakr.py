"""SeaKR's control flow with a scripted backend: retrieval decisions, re-ranking, reasoning."""
import math

import pytest

from fakes import FakeBackend, FakeSearcher, gen, hit
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import UserError
from seakr_repro.methods import build_method
from seakr_repro.methods.seakr.query import formulate_query

Q = QuestionRecord(id="q1", question="Who directed the film Zorro Nights?", answers=["Ann Lee"])
DOCS = [hit("d1", "Zorro Nights is a film by Bob Ray."), hit("d2", "Zorro Nights was directed by Ann Lee."),
        hit("d3", "Ann Lee is a director.")]


def tail(prompt):
    return prompt.rsplit("Answer in the same format as before.", 1)[1]


def context(prompt):
    pre = prompt.rsplit("Answer in the same format as before.", 1)[0].rsplit("\n\n", 1)[-1]
    return pre if pre.startswith("Context:") else ""


def make(respond, level, docs=DOCS, **kw):
    backend, searcher = FakeBackend(respond, level), FakeSearcher(docs)
    kw.setdefault("n_shot", 1)
    # k = 20 as the paper: with fewer samples even identical vectors score above -6
    return build_method("seakr", backend, searcher, "bundled-2wiki", **kw), backend, searcher


def final_answer(prompt, stop):
    """Final calls (no ". " stop): answer from what the context says."""
    ctx = context(prompt)
    if "Ann Lee" in ctx:
        return "Zorro Nights was directed by Ann Lee. So the answer is Ann Lee."
    return "So the answer is unknown."


def test_no_retrieval_when_confident():
    def respond(p, stop):
        if ". " not in stop:
            return "The film was directed by Ann Lee. So the answer is Ann Lee."
        return "So the answer is Ann Lee." if "Ann Lee." in tail(p) else "Zorro Nights was directed by Ann Lee"
    m, b, s = make(respond, lambda p: "low")
    r = m.run(Q)
    assert s.queries == [] and r.n_retrievals == 0
    assert r.answer == "Ann Lee"
    assert [t["kind"] for t in r.trace[:2]] == ["pseudo_step", "pseudo_step"]
    assert r.extra["stop_reason"] == "answer"
    assert r.trace[0]["u"] < -6.0 and r.trace[0]["retrieve"] is False
    assert b.sample_calls[0]["layer"] == 1            # "middle" = n_layers/2 - 1


def test_retrieves_when_uncertain_and_reranks_by_lowest_u():
    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        ctx = context(p)
        if "Ann Lee." in tail(p):
            return "So the answer is Ann Lee."
        if ctx:
            return "Zorro Nights was directed by Ann Lee"
        return "Zorro Nights was directed by Tom Hux"
    # U: low only when d2's text is the (last) context document
    level = lambda p: "low" if "directed by Ann Lee.\n" in context(p) or "Ann Lee." in tail(p) else "high"
    m, b, s = make(respond, level)
    r = m.run(Q)
    rerank = next(t for t in r.trace if t["kind"] == "rerank")
    assert rerank["chosen"] == "d2"
    us = {c["id"]: c["u"] for c in rerank["candidates"]}
    assert us["d2"] == min(us.values()) and us["d1"] > -6.0
    assert len(s.queries) == 1 and r.extra["doc_ids"] == ["d2"]
    assert r.answer == "Ann Lee" and r.extra["choice"] in ("rationales", "knowledge")


def test_concurrent_backend_scores_candidates_side_by_side_with_the_same_result():
    """With a batching backend (vLLM) the N re-ranking candidates' greedy steps run on threads and
    their k samples go out as one sample_many batch; the trace, the choice and the answer are those
    of the sequential run."""
    import threading
    import time

    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        if "Ann Lee." in tail(p):
            return "So the answer is Ann Lee."
        return "Zorro Nights was directed by Ann Lee" if context(p) else "Zorro Nights was directed by Tom Hux"
    level = lambda p: "low" if "directed by Ann Lee.\n" in context(p) or "Ann Lee." in tail(p) else "high"

    class Concurrent(FakeBackend):
        concurrent = True
        threads: set = set()

        batches: list = []

        def generate(self, prompt, **kw):
            self.threads.add(threading.get_ident())
            time.sleep(0.01)
            return super().generate(prompt, **kw)

        def sample_many(self, prompts, settings):
            self.batches.append(len(prompts))
            return super().sample_many(prompts, settings)

    seq, _, _ = make(respond, level)
    backend = Concurrent(respond, level)
    par = build_method("seakr", backend, FakeSearcher(DOCS), "bundled-2wiki", n_shot=1)
    a, b = seq.run(Q), par.run(Q)
    assert len(backend.threads) > 1
    assert max(backend.batches) == len(next(t for t in b.trace if t["kind"] == "rerank")["candidates"]) > 1
    assert (a.answer, a.extra["doc_ids"]) == (b.answer, b.extra["doc_ids"])
    assert [t["kind"] for t in a.trace] == [t["kind"] for t in b.trace]
    ra, rb = (next(t for t in r.trace if t["kind"] == "rerank") for r in (a, b))
    assert [c["id"] for c in ra["candidates"]] == [c["id"] for c in rb["candidates"]]
    assert [c["u"] for c in ra["candidates"]] == [c["u"] for c in rb["candidates"]]


def test_empty_candidate_output_ranks_last_and_used_docs_are_skipped():
    seen_ctx = []

    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        ctx = context(p)
        if ctx:
            seen_ctx.append(ctx)
            # d1 as the newest doc gives an empty step even though its U is the lowest
            return "" if ctx.rstrip().endswith("Bob Ray.") else f"Step {len(seen_ctx)} about Zorro"
        return "Zorro Nights was directed by Tom Hux"
    level = lambda p: "low" if context(p).rstrip().endswith("Bob Ray.") else (
        "high" if not context(p) else 0.5)
    m, b, s = make(respond, level, max_docs=2, max_reasoning_steps=5)
    r = m.run(Q)
    reranks = [t for t in r.trace if t["kind"] == "rerank"]
    first = reranks[0]
    d1 = next(c for c in first["candidates"] if c["id"] == "d1")
    assert d1["output"] == "" and d1["key"] == math.inf and first["chosen"] != "d1"
    # every step fails (U of a 0.5 spread > -6), so a second retrieval runs: the chosen doc is skipped
    if len(reranks) > 1:
        assert first["chosen"] not in [c["id"] for c in reranks[1]["candidates"]]
    assert len(r.extra["doc_ids"]) == len(set(r.extra["doc_ids"]))


def test_repeated_query_stops_retrieval():
    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        return "Zorro Nights was directed by Tom Hux"     # same failing step -> same query
    m, b, s = make(respond, lambda p: "high")
    r = m.run(Q)
    assert len(s.queries) == 1
    assert r.extra["stop_reason"] == "no_more_docs"
    assert any(t.get("duplicate") for t in r.trace if t["kind"] == "retrieve")


def test_empty_step_triggers_retrieval_even_with_low_u():
    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        return "" if not context(p) else "So the answer is Ann Lee."
    m, b, s = make(respond, lambda p: "low")
    r = m.run(Q)
    assert r.trace[0]["output"] == "" and r.trace[0]["retrieve"] is True
    assert len(s.queries) == 1
    assert s.queries[0] == "directed film Zorro Nights"   # question content-word fallback


def test_max_docs_and_max_steps():
    counter = {"n": 0}

    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        counter["n"] += 1
        return f"Fact number {counter['n']} holds"
    m, _, s = make(respond, lambda p: "high", max_docs=2, max_reasoning_steps=10)
    r = m.run(Q)
    assert r.extra["n_docs"] == 2 and r.extra["stop_reason"] == "max_docs"
    m, _, s = make(respond, lambda p: "low", max_reasoning_steps=3)
    r = m.run(Q)
    assert len(r.extra["steps"]) == 3 and r.extra["stop_reason"] == "max_steps" and s.queries == []


def _reasoning_case(rationale_out, knowledge_out, u_rationale, u_knowledge, **kw):
    def respond(p, stop):
        if ". " not in stop:
            return rationale_out if "[1] Ann" in context(p) or "[1] Zorro Nights is" in context(p) else knowledge_out
        return "So the answer is Ann Lee." if "it." in tail(p) else "Ann Lee directed it"

    def level(p, stop):
        if ". " in stop:
            return "low"
        return u_rationale if "[1] Ann" in context(p) else u_knowledge
    m, _, _ = make(respond, level, **kw)
    return m.run(Q)


def test_reasoning_keeps_lower_u_and_applies_unknown_rule():
    r = _reasoning_case("So the answer is Ann Lee.", "So the answer is Bob Ray.", "low", "high")
    assert (r.answer, r.extra["choice"]) == ("Ann Lee", "rationales")
    r = _reasoning_case("So the answer is Ann Lee.", "So the answer is Bob Ray.", "high", "low")
    assert (r.answer, r.extra["choice"]) == ("Bob Ray", "knowledge")
    assert r.extra["rationale_answer"] == "Ann Lee" and r.extra["knowledge_answer"] == "Bob Ray"
    r = _reasoning_case("So the answer is unknown.", "So the answer is Bob Ray.", "low", "high")
    assert r.extra["choice"] == "knowledge"
    r = _reasoning_case("So the answer is Ann Lee.", "So the answer is unknown.", "high", "low")
    assert r.extra["choice"] == "rationales"


def test_reasoning_switch_forces_a_path():
    r = _reasoning_case("So the answer is Ann Lee.", "So the answer is Bob Ray.", "low", "high",
                        reasoning="knowledge")
    assert r.answer == "Bob Ray"
    r = _reasoning_case("So the answer is Ann Lee.", "So the answer is Bob Ray.", "high", "low",
                        reasoning="rationales")
    assert r.answer == "Ann Lee"


def test_reask_when_no_answer_stated():
    def respond(p, stop):
        if p.endswith(" So the answer is "):
            return "Ann Lee"
        if ". " not in stop:
            return "Zorro Nights was directed by Ann Lee"       # no "the answer is"
        return "So the answer is Ann Lee." if "Lee." in tail(p) else "Ann Lee directed it"
    m, b, _ = make(respond, lambda p: "low")
    r = m.run(Q)
    assert r.answer == "Ann Lee"
    forced = [p for p, _ in b.generate_calls if p.endswith(" So the answer is ")]
    assert len(forced) == 2 and all("Zorro Nights was directed by Ann Lee So the answer is " in p for p in forced)


def test_self_aware_retrieval_off_retrieves_every_step_and_rerank_off_skips_sampling():
    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        return "So the answer is Ann Lee." if context(p).count("[") >= 2 else f"Fact {context(p).count('[')} here"
    m, b, s = make(respond, lambda p: "low", self_aware_retrieval=False, rerank=False)
    r = m.run(Q)
    assert len(s.queries) == 2                      # both steps retrieved despite low U
    reranks = [t for t in r.trace if t["kind"] == "rerank"]
    assert [t["chosen"] for t in reranks] == ["d1", "d2"]   # BM25's top unused document
    assert all(len(t["candidates"]) == 1 for t in reranks)
    # no U was sampled before the final reasoning calls
    assert len(b.sample_calls) == 2


def test_query_formulation_prob_threshold_content_words_and_faithful_last_sentence():
    text = "Zorro Nights was shot in Spain. The director was Tom Hux"
    g = gen(text, probs=[0.99, 0.99, 0.99, 0.99, 0.99, 0.5, 0.99, 0.99, 0.99, 0.99, 0.3])
    q, info = formulate_query(g.text, g.tokens, g.logprobs, "Who directed Zorro Nights?", None,
                              mode="fixed")
    assert q == "Zorro Nights shot director Tom"   # Spain (p .5) and Hux (p .3) dropped; "was" not content
    q, _ = formulate_query(g.text, g.tokens, g.logprobs, "Who directed Zorro Nights?", None,
                           mode="faithful")
    assert q == "director Tom"                     # the code keeps only the last sentence
    # a risky word that occurs in the question is kept
    q, _ = formulate_query(g.text, g.tokens, g.logprobs, "Was Hux in Spain?", None, mode="fixed")
    assert "Spain" in q and "Hux" in q


def test_faithful_mode_deletes_periods_in_steps_and_question():
    rec = QuestionRecord(id="q2", question="Who is Dr. No's director?", answers=["x"])

    def respond(p, stop):
        if ". " not in stop:
            return "So the answer is x."
        return "So the answer is x." if "Mr" in tail(p) else "Made by Mr. T"
    m, b, _ = make(respond, lambda p: "low", mode="faithful")
    m.run(rec)
    prompts = [p for p, _ in b.generate_calls]
    assert "Question: Who is Dr  No's director?" in prompts[0]
    assert tail(prompts[1]).endswith("Answer: Made by Mr T.")


def test_simple_qa_keeps_direct_answer_or_best_passage():
    def respond(p, stop):
        if "Bob Ray" in context(p):
            return "So the answer is Bob Ray."
        if "Ann Lee" in context(p):
            return "So the answer is Ann Lee."
        return "So the answer is Tom Hux."
    for direct_level, expected in (("low", "Tom Hux"), ("high", "Ann Lee")):
        level = lambda p, d=direct_level: d if not context(p) else (
            "low" if "directed by Ann Lee" in context(p) else "high")
        backend, searcher = FakeBackend(respond, level), FakeSearcher(DOCS)
        m = build_method("seakr", backend, searcher, "bundled-single", n_shot=1)
        r = m.run(Q)
        assert r.answer == expected
        if direct_level == "low":   # confident: the direct answer is kept, no passage is scored
            assert r.n_retrievals == 0 and searcher.queries == [] and r.extra["passage_us"] == []
        else:
            assert r.n_retrievals == 1 and searcher.queries == [Q.question]
            assert len(r.extra["passage_us"]) == 3


def test_estimator_switch_and_delta_requirement():
    with pytest.raises(UserError):
        make(lambda p, s: "", lambda p: "low", estimator="perplexity")
    respond = lambda p, stop: gen("Zorro is old", probs=[0.2] * 3) if ". " in stop else "So the answer is Ann Lee."
    m, b, s = make(respond, lambda p: "low", estimator="perplexity", delta=2.0)
    r = m.run(Q)
    assert r.trace[0]["u"] == pytest.approx(5.0) and r.trace[0]["retrieve"] is True
    assert b.sample_calls == []                        # perplexity needs no samples
    with pytest.raises(UserError):
        make(respond, lambda p: "low", estimator="nope")


# -- the official code's last four behaviours (issue 21, points 7-10): faithful as the code, fixed not


def test_official_retriever_pads_a_short_search_with_empty_passages_that_compete():
    """SEAKR/retriever.py pads fewer than N = 3 hits with empty passages (fresh random ids); they
    are re-ranked like the others and one can enter the context as an empty "[1]"."""
    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        ctx = context(p).strip()
        if ctx == "Context: [1]":
            return "So the answer is Ann Lee."
        return "Bob Ray made it" if ctx else "Zorro Nights was directed by Tom Hux"
    level = lambda p, stop: "low" if ". " not in stop or context(p).strip() == "Context: [1]" else "high"
    for mode, ids in (("faithful", ["d1", "_empty-1-1", "_empty-1-2"]), ("fixed", ["d1"])):
        backend, searcher = FakeBackend(respond, level), FakeSearcher(DOCS, results=lambda q: DOCS[:1])
        m = build_method("seakr", backend, searcher, "bundled-2wiki", n_shot=1, mode=mode)
        r = m.run(Q)
        rerank = next(t for t in r.trace if t["kind"] == "rerank")
        assert [c["id"] for c in rerank["candidates"]] == ids
        if mode == "faithful":     # equal U of the two empty passages: the first wins (stable sort)
            assert rerank["chosen"] == "_empty-1-1" and r.extra["doc_ids"] == ["_empty-1-1"]
            assert r.extra["steps"][-1] == "So the answer is Ann Lee."
            assert any(context(p).strip() == "Context: [1]" for p, _ in backend.generate_calls)
        else:
            assert rerank["chosen"] == "d1" and r.extra["doc_ids"] == ["d1"]


def test_official_stop_checker_overwrites_the_max_tokens_th_token_the_query_reads():
    """At max_tokens the forked engine's stop checker overwrites the last token with EOS, log-prob
    and text included (stop_checker.py, _change_last_token); the query builder then has no token
    for the last word and drops it, even a word of the question (reasoner.py, _restruct_tokens)."""
    def respond(p, stop):
        if ". " not in stop:
            return final_answer(p, stop)
        if context(p):
            return "So the answer is Ann Lee."
        g = gen("The film Zorro Nights came out before Gaumont", probs=[0.99] * 6 + [0.5, 0.99])
        g.finish_reason = "length"        # the step ran into max_tokens
        return g
    queries = {}
    for forced in ("replace_last", "append"):
        rec = QuestionRecord(id="q3", question="Did Gaumont release Zorro Nights?", answers=["x"])
        backend, searcher = FakeBackend(respond, lambda p, stop: "high" if ". " in stop else "low"), FakeSearcher(DOCS)
        build_method("seakr", backend, searcher, "bundled-2wiki", n_shot=1, mode="fixed",
                     forced_eos=forced).run(rec)
        queries[forced] = searcher.queries[0]
    assert queries["append"] == "film Zorro Nights came Gaumont"
    assert queries["replace_last"] == "film Zorro Nights came"
    # a word of several tokens keeps its other ones and is judged on them
    from seakr_repro.llm.base import Generation
    from seakr_repro.methods.seakr.query import engine_view
    g = Generation("in Gaumont", token_ids=[1, 2, 3], tokens=[" in", " Gau", "mont"],
                   logprobs=[0.0, math.log(0.99), math.log(0.2)], finish_reason="length")
    toks, lps = engine_view(g, "replace_last")
    q, info = formulate_query(g.text, toks, lps, "Where?", None, mode="faithful")
    assert (toks, lps[-1]) == ([" in", " Gau", ""], 0.0) and q == "Gaumont"
    assert engine_view(g, "append") == (g.tokens, g.logprobs)
    g.finish_reason = "stop"                  # a stop string's token is past the returned text
    assert engine_view(g, "replace_last") == (g.tokens, g.logprobs)


def test_official_simple_qa_choice_is_the_lowest_u_over_every_passage_empty_outputs_included():
    """eval_singlehop.ipynb takes idxmin of eigen_score over the ten passages, whatever the output;
    the re-ask then answers from the chosen (empty) output (main_simpleqa.py)."""
    def respond(p, stop):
        if p.endswith(" So the answer is "):
            return "Bob Ray"
        if "Bob Ray" in context(p):
            return ""
        if "Ann Lee" in context(p):
            return "So the answer is Ann Lee."
        return "So the answer is Tom Hux."
    # the direct answer is unsure; d1 (empty output) has the lowest U, then d2
    level = lambda p: ("low" if "Bob Ray" in context(p) else 0.01 if "directed by" in context(p)
                       else "high")
    for mode, chosen, answer in (("faithful", "d1", "Bob Ray"), ("fixed", "d2", "Ann Lee")):
        backend, searcher = FakeBackend(respond, level), FakeSearcher(DOCS)
        r = build_method("seakr", backend, searcher, "bundled-single", n_shot=1, mode=mode).run(Q)
        assert (r.extra["chosen_doc"], r.answer) == (chosen, answer)
        assert min(r.extra["passage_us"]) == r.extra["passage_us"][0]
