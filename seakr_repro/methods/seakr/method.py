"""SeaKR (Yao et al.): self-aware retrieval, re-ranking and reasoning, as the official reasoner runs.

Complex QA, per iteration (facts, steps 1-5):
1. greedy pseudo-step (stops: base + "\n" once steps exist + ". "); U(c_r) from k samples; the step
   FAILS when it is empty or U > delta. A step stating "the answer is ..." ends the loop first, as
   in the code (the check runs before the failure test).
2. a failed step is discarded and turned into a query (`query.py`); a repeated query ends the loop.
3. BM25 top N = 3 (faithful: padded to N with empty passages, as the code's retriever pads a
   short result), documents already selected skipped; each candidate regenerates the step with
   context = selected docs + candidate; the lowest U wins (empty output = +inf) and joins the context.
   No unused candidate ends the loop.
4. stop on an answer, after max_reasoning_steps steps or max_docs documents.
5. two final calls: rationale path (the steps, minus sentences stating the answer, as context) and
   knowledge path (all selected documents, final mode). Keep the lower-U answer; a missing answer
   or one containing "unknown" loses. A call without an extractable answer is re-asked with
   " So the answer is " appended.
Simple QA (`simple_qa`): one retrieval round -- the direct answer if its U < delta, else the
answer of the one-passage prompt with the lowest U, over DPR's precomputed top 10
(`simple_qa_passages: official`, as main_simpleqa.py) or BM25's top 10 from our corpus (`bm25`);
an empty output competes with its U in faithful mode (eval_singlehop.ipynb), ranks last in fixed.

Switches (Table 3): estimator, forced_eos (replace_last | append; replace_last also overwrites the
last token of the greedy step the query is built from), self_aware_retrieval (False: every step
retrieves), rerank (False: BM25's top unused document), reasoning (self_aware | rationales |
knowledge), mode (fixed | faithful: the official code's bugs, docs/faithful-and-fixed.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

from ...data.registry import top_passages_path
from ...core.errors import UserError
from ...llm.base import generate_and_sample_many, generate_many, same_settings
from ...evaluation import answer_from_forced, extract_answer
from ...prompts import (
    PromptFitter,
    format_context,
    read_all_docs_prompt,
    read_all_steps_prompt,
    simple_qa_stops,
    stop_strings,
)
from ...retrieval.base import Hit
from ...retrieval.passages import PrecomputedPassages
from ..base import Method, MethodResult, hits_brief, step_record
from .query import engine_view, formulate_query, truncate_tokens
from ...llm.stops import check_forced_eos
from .uncertainty import Scorer, resolve_delta
from ..text import sentences

SIMPLE_FAMILY = "simple"
REASONING = ("self_aware", "rationales", "knowledge")
MODES = ("fixed", "faithful")
SIMPLE_PASSAGES = ("official", "bm25")   # DPR's precomputed top 10 (main_simpleqa.py) | our BM25


@dataclass
class Step:
    text: str
    u: float | None
    kind: str                      # direct | rag
    query: str | None = None
    doc_id: str | None = None
    gen: object = field(default=None, repr=False)


def _missing(answer: str | None) -> bool:
    """The code's check_none_or_unknown (fixed mode also treats an empty answer as missing)."""
    return answer is None or "unknown" in answer.lower()


_U, _S = "uncertainty.", "seakr."   # config sections of SeaKR.CONFIG


class SeaKR(Method):
    name = "seakr"
    DEFAULTS = {
        "estimator": "eigen", "delta": None, "k": 20, "temperature": 1.0, "top_k": 50, "top_p": 0.9,
        "seed": 42, "sample_max_tokens": 100, "layer": "middle", "hook": "mlp_out", "alpha": 1e-3,
        "variant": "seakr", "forced_eos": "append", "mode": "fixed", "n_shot": 10,
        "max_reasoning_steps": 7, "max_docs": 5,
        "max_new_tokens": 100, "query_prob_threshold": 0.1, "query_max_tokens": 64, "top_n": 3,
        "self_aware_retrieval": True, "rerank": True, "reasoning": "self_aware",
        "simple_qa": None, "simple_qa_top": 10, "simple_qa_forced_tokens": 20,
        "simple_qa_passages": "bm25", "simple_qa_passages_path": None,
        "demos": "paper", "official_repo": None,
    }

    CONFIG = {
        "k": _U + "k", "temperature": _U + "temperature", "top_k": _U + "top_k", "top_p": _U + "top_p",
        "sample_max_tokens": _U + "max_tokens", "layer": _U + "layer", "hook": _U + "hook",
        "alpha": _U + "alpha", "variant": _U + "variant", "forced_eos": _U + "forced_eos", "seed": "seed",
        "mode": _S + "mode", "n_shot": _S + "n_shot", "max_reasoning_steps": _S + "max_reasoning_steps",
        "max_docs": _S + "max_docs", "max_new_tokens": _S + "max_new_tokens",
        "query_prob_threshold": _S + "query_prob_threshold", "query_max_tokens": _S + "query_max_tokens",
        "top_n": "retrieval.top_n", "simple_qa_top": _S + "simple_qa_top",
        "simple_qa_passages": _S + "simple_qa_passages", "simple_qa_passages_path": _S + "simple_qa_passages_path",
        "demos": "prompts.demos", "official_repo": "prompts.official_repo",
    }   # delta comes from step 03 / uncertainty.delta (runs.grid.method_settings)

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        s = self.settings
        if s["simple_qa"] is None:   # Table 2 protocol on the single-hop sets
            s["simple_qa"] = self.family == SIMPLE_FAMILY
        if s["mode"] not in MODES:
            raise UserError(f"unknown mode '{s['mode']}'", setting="seakr.mode", fix="use fixed or faithful")
        if s["reasoning"] not in REASONING:
            raise UserError(f"unknown reasoning '{s['reasoning']}'", setting="reasoning",
                            fix=f"use one of {', '.join(REASONING)}")
        check_forced_eos(s["forced_eos"])
        if s["simple_qa_passages"] not in SIMPLE_PASSAGES:
            raise UserError(f"unknown simple_qa_passages '{s['simple_qa_passages']}'",
                            setting="seakr.simple_qa_passages",
                            fix=f"use one of {', '.join(SIMPLE_PASSAGES)}")
        if s["simple_qa"] and s["simple_qa_passages"] == "official":   # missing file: fail now
            self._passages = PrecomputedPassages(
                s["simple_qa_passages_path"] or top_passages_path(dataset_name), s["simple_qa_top"])
            _ = self._passages.table
        _ = self.demos   # a missing official clone fails here, not mid-run
        s["delta"] = resolve_delta(s["delta"], s["estimator"])
        Scorer(backend, s, "")   # validates the estimator and the samples' settings now rather than mid-run

    # -- one LLM call: greedy step + optional U ------------------------------------------------
    def _call(self, prompt, stop, need_u: bool, context: str = "", max_new_tokens=None):
        return self._calls([prompt], [stop], need_u, [context], max_new_tokens)[0]

    def _calls(self, prompts, stops, need_u: bool, contexts, max_new_tokens=None):
        """[(greedy Generation, U or None)] of independent contexts (one stop list each). With samples,
        every greedy step and its k samples are ONE backend call (`generate_and_sample_many`);
        without, greedy steps with the same stops are one batch (`generate_many`)."""
        scorer = self.q.scorer
        kws = [dict(max_new_tokens=max_new_tokens or self.settings["max_new_tokens"], stop=list(st),
                    want_stats=scorer.wants_stats) for st in stops]
        if not prompts:
            return []
        if need_u and scorer.wants_samples:
            pairs = generate_and_sample_many(self.backend, prompts, generate=kws,
                                             sample=[scorer.sampling(st) for st in stops])
            gens, sets = [g for g, _ in pairs], [ss for _, ss in pairs]
            return list(zip(gens, scorer.from_samples(gens, sets, contexts)))
        gens: list = [None] * len(prompts)
        for idx in same_settings(kws):
            for i, g in zip(idx, generate_many(self.backend, [prompts[i] for i in idx], **kws[idx[0]])):
                gens[i] = g
        us = (scorer.from_samples(gens, [None] * len(prompts), contexts) if need_u
              else [None] * len(prompts))
        return list(zip(gens, us))

    def _extract(self, text):
        answer = extract_answer(text, self.settings["mode"])
        if self.settings["mode"] == "fixed" and answer is not None and not answer.strip():
            return None
        return answer

    def answer(self, record) -> MethodResult:
        question = record.question
        if self.settings["mode"] == "faithful" and not self.settings["simple_qa"]:
            question = question.replace(".", " ")   # the reasoner does this to every question
        self.q.scorer = Scorer(self.backend, self.settings, question)
        # every prompt of this question fits the context with room for the longest call made
        # on it (greedy, k samples + the forced EOS, or the simple-QA re-ask)
        s = self.settings
        self.q.fitter = PromptFitter(self.backend)
        self.q.fit = partial(self.q.fitter, reserve=max(
            s["max_new_tokens"], s["sample_max_tokens"] + 1, s["simple_qa_forced_tokens"]))
        if self.settings["simple_qa"]:
            return self._run_simple(question)
        return self._run_complex(question)

    # -- complex QA -----------------------------------------------------------------------------
    def _context(self, steps, docs) -> str:
        return format_context(docs) + " ".join(st.text for st in steps)

    def _run_complex(self, question: str) -> MethodResult:
        s, demos = self.settings, self.demos
        steps: list[Step] = []
        docs: list[str] = []
        doc_ids: list[str] = []
        searched: set[str] = set()
        trace: list[dict] = []
        stop_reason = "max_steps"
        while True:
            texts = [st.text for st in steps]
            prompt = self.q.fit(demos, question, texts, docs, s["mode"])
            stops = stop_strings(bool(steps), final=False)
            gen, u = self._call(prompt, stops, s["self_aware_retrieval"], self._context(steps, docs))
            failed = (not gen.text.strip()) or (not s["self_aware_retrieval"]) or u > s["delta"]
            trace.append(step_record("pseudo_step", prompt, gen.text, u=u, delta=s["delta"],
                                     retrieve=failed, n_docs=len(docs)))
            if self._extract(gen.text):
                steps.append(Step(gen.text, u, "direct", gen=gen))
                stop_reason = "answer"
                break
            if failed:
                new = self._retrieve(question, gen, steps, docs, doc_ids, searched, trace)
                if new is None:
                    stop_reason = "no_more_docs"
                    break
                steps.append(new)
                if self._extract(new.text):
                    stop_reason = "answer"
                    break
            else:
                steps.append(Step(gen.text, u, "direct", gen=gen))
            if len(steps) >= s["max_reasoning_steps"]:
                break
            if len(docs) >= s["max_docs"]:
                stop_reason = "max_docs"
                break
        return self._reason(question, steps, docs, doc_ids, trace, stop_reason)

    def _retrieve(self, question, gen, steps, docs, doc_ids, searched, trace) -> Step | None:
        s = self.settings
        previous = steps[-1].text if steps else None
        tokens, logprobs = engine_view(gen, s["forced_eos"], s["mode"])
        query, info = formulate_query(gen.text, tokens, logprobs, question, previous,
                                      prob_threshold=s["query_prob_threshold"], mode=s["mode"])
        entry = {"kind": "retrieve", "failed_step": gen.text, "query": query, "query_info": info}
        trace.append(entry)
        if query in searched:
            entry["duplicate"] = True
            return None
        searched.add(query)
        hits = self.search(truncate_tokens(query, s["query_max_tokens"],
                                           getattr(self.backend, "count_tokens", None)), s["top_n"])
        self.q.n_search += 1
        entry["hits"] = hits_brief(hits)
        if s["mode"] == "faithful":   # the code's retriever pads to N with empty passages
            hits = hits + [Hit(f"_empty-{self.q.n_search}-{i}", 0.0, "", "")
                           for i in range(len(hits), s["top_n"])]
        cands = [h for h in hits if h.id not in doc_ids]
        if not cands:
            return None
        if not s["rerank"]:
            cands = cands[:1]
        texts = [st.text for st in steps]
        stops = stop_strings(bool(steps), final=False)

        # the N candidates are independent: scored as one batch
        prompts = [self.q.fit(self.demos, question, texts, docs + [h.text], s["mode"]) for h in cands]
        called = self._calls(prompts, [stops] * len(prompts), s["rerank"],
                             [self._context(steps, docs + [h.text]) for h in cands])
        scored = [((u if g.text.strip() else math.inf) if s["rerank"] else 0.0, h, g, u)
                  for h, (g, u) in zip(cands, called)]
        best = min(scored, key=lambda t: t[0])   # first wins ties, as the code's stable sort
        _, hit, g, u = best
        docs.append(hit.text)
        doc_ids.append(hit.id)
        trace.append(step_record("rerank", "", g.text, query=query,
                                 candidates=[{"id": h.id, "title": getattr(h, "title", ""), "u": uu,
                                              "key": k, "output": gg.text} for k, h, gg, uu in scored],
                                 chosen=hit.id, u=u))
        return Step(g.text, u, "rag", query=query, doc_id=hit.id, gen=g)

    def _filtered_steps(self, steps) -> list[str]:
        """The code's filter_last_step: drop the last step's sentences that state the answer."""
        texts = [st.text for st in steps]
        if not texts:
            return texts
        kept = [x for x in sentences(texts[-1])
                if "the answer is" not in x.lower() and "is the answer" not in x.lower()]
        last = " ".join(kept)
        return texts[:-1] + [last] if last.strip() else texts[:-1]

    def _final_paths(self, paths, trace) -> list[tuple]:
        """(answer, U, full output) of each final path (kind, build(suffix) -> fitted prompt, stop,
        reask_stop, u_from_reask); the first calls are one batch, a re-ask follows its own call."""
        prompts = [build("") for _, build, _, _, _ in paths]
        firsts = self._calls(prompts, [stop for _, _, stop, _, _ in paths], True, [""] * len(paths))
        out = []
        for (kind, build, _, reask_stop, u_from_reask), prompt, (gen, u) in zip(paths, prompts, firsts):
            answer = self._extract(gen.text)
            full = gen.text
            reasked = answer is None or (kind == "rationales" and not answer)
            if reasked:
                first = "" if self.settings["mode"] == "faithful" else gen.text
                forced, u2 = self._call(build(first + " So the answer is "), reask_stop, u_from_reask)
                answer = answer_from_forced(forced.text, self.settings["mode"])
                full += f" So the answer is {forced.text}"
                if u_from_reask:
                    u = u2
            trace.append(step_record(f"final_{kind}", prompt, full, u=u, answer=answer, reasked=reasked))
            out.append((answer, u, full))
        return out

    def _reason(self, question, steps, docs, doc_ids, trace, stop_reason) -> MethodResult:
        faithful = self.settings["mode"] == "faithful"
        rationale = self._filtered_steps(steps)
        build_r = lambda sfx: read_all_steps_prompt(   # noqa: E731
            self.demos, question, rationale, build=partial(self.q.fit, suffix=sfx))[0]
        stop_r = read_all_steps_prompt(self.demos, question, rationale)[1]
        build_k = lambda sfx: read_all_docs_prompt(   # noqa: E731
            self.demos, question, docs, build=partial(self.q.fit, suffix=sfx))[0]
        stop_k = read_all_docs_prompt(self.demos, question, docs)[1]
        # the code re-asks the knowledge path with "\n" added and keeps the re-ask's U
        (ans_r, u_r, full_r), (ans_k, u_k, full_k) = self._final_paths(
            [("rationales", build_r, stop_r, stop_r, False),
             ("knowledge", build_k, stop_k, [*stop_k, "\n"], faithful)], trace)
        if self.settings["reasoning"] in ("rationales", "knowledge"):
            choice = self.settings["reasoning"]
        elif _missing(ans_r) or (not faithful and not ans_r):
            choice = "knowledge"
        elif _missing(ans_k) or (not faithful and not ans_k):
            choice = "rationales"
        else:
            choice = "rationales" if u_r < u_k else "knowledge"
        answer, raw = (ans_r, full_r) if choice == "rationales" else (ans_k, full_k)
        extra = {"rationale_answer": ans_r, "rationale_u": u_r, "knowledge_answer": ans_k,
                 "knowledge_u": u_k, "choice": choice, "stop_reason": stop_reason,
                 "steps": [st.text for st in steps], "doc_ids": list(doc_ids), "n_docs": len(docs),
                 **self.q.fitter.record()}
        return MethodResult(answer=answer or "", raw_output=raw, trace=trace,
                            n_retrievals=self.q.n_search, extra=extra)

    # -- simple QA ------------------------------------------------------------------------------
    def _simple_answer(self, build, gen):
        answer = self._extract(gen.text)
        if answer is None or not answer.strip():   # the script re-asks on None or blank
            forced, _ = self._call(build(gen.text + " So the answer is "), simple_qa_stops(), False,
                                   max_new_tokens=self.settings["simple_qa_forced_tokens"])
            answer = answer_from_forced(forced.text, self.settings["mode"])
        return answer

    def _run_simple(self, question: str) -> MethodResult:
        s, demos, stops = self.settings, self.demos, simple_qa_stops()
        trace: list[dict] = []
        direct = partial(self.q.fit, demos, question)
        direct_prompt = direct()
        g0, u0 = self._call(direct_prompt, stops, True)
        trace.append(step_record("direct", direct_prompt, g0.text, u=u0, delta=s["delta"]))
        keep_direct = s["self_aware_retrieval"] and u0 < s["delta"]
        direct_answer = self._simple_answer(lambda sfx: direct(suffix=sfx), g0)
        if keep_direct:
            # the official script scores all 10 passages regardless: they cannot change a kept answer
            trace.append(step_record("choice", "", g0.text, chosen=None, kept_direct=True))
            return MethodResult(answer=direct_answer or "", raw_output=g0.text, trace=trace,
                                n_retrievals=0, extra={"direct_answer": direct_answer, "direct_u": u0,
                                                       "chosen_doc": None, "passage_us": [],
                                                       **self.q.fitter.record()})
        if s["simple_qa_passages"] == "official":   # the script's precomputed DPR passages
            hits = self._passages.search(question, s["simple_qa_top"])
        else:
            hits = self.search(question, s["simple_qa_top"])
        self.q.n_search += 1
        if not s["rerank"]:
            hits = hits[:1]
        called = self._calls([self.q.fit(demos, question, docs=[h.text]) for h in hits],
                             [stops] * len(hits), s["rerank"], [format_context([h.text]) for h in hits])
        # the script's choice (eval_singlehop.ipynb) is the lowest U over all passages, empty
        # outputs included; fixed ranks an empty output last, as complex QA's re-ranking does
        empty_last = s["mode"] == "fixed"
        cands = [((u if g.text.strip() or not empty_last else math.inf) if s["rerank"] else 0.0, h,
                  partial(self.q.fit, demos, question, docs=[h.text]), g, u)
                 for h, (g, u) in zip(hits, called)]
        trace.append(step_record("passages", "", "", hits=hits_brief(hits),
                                 candidates=[{"id": h.id, "u": u, "output": g.text}
                                             for _, h, _, g, u in cands]))
        if not cands:
            answer, raw, chosen = direct_answer, g0.text, None
        else:
            _, h, build, g, _ = min(cands, key=lambda t: t[0])
            answer, raw, chosen = self._simple_answer(lambda sfx: build(suffix=sfx), g), g.text, h.id
        trace.append(step_record("choice", "", raw, chosen=chosen, kept_direct=chosen is None))
        extra = {"direct_answer": direct_answer, "direct_u": u0, "chosen_doc": chosen,
                 "passage_us": [u for _, _, _, _, u in cands], **self.q.fitter.record()}
        return MethodResult(answer=answer or "", raw_output=raw, trace=trace,
                            n_retrievals=self.q.n_search, extra=extra)
