"""Self-RAG (Asai et al.) short-form inference with reflection tokens.

Needs the Self-RAG checkpoint (selfrag/selfrag_llama2_7b), whose vocabulary holds the reflection
tokens. Steps: p = P([Retrieval]) / (P([Retrieval]) + P([No Retrieval])) after the prompt; p >
threshold (0.2) retrieves the top `ndocs` passages and generates one continuation per passage;
each is scored exp(mean token log-prob) + w_rel * ISREL + w_sup * ISSUP + w_use * ISUSE, with
ISREL = P([Relevant]) normalised over {Relevant, Irrelevant}, ISSUP = P(Fully) + 0.5 P(Partially)
normalised over the three support tokens, ISUSE = sum_i w_i P([Utility:i]) normalised, w = (-1,
-0.5, 0, 0.5, 1); the best continuation is the answer. The token probabilities are read with
teacher forcing (`backend.score`) at the positions where Self-RAG reads them from its generation.
"""
from __future__ import annotations

import math
import re

from ..core.errors import DataMissingError
from ..llm.reflection_tokens import NO_RETRIEVE, REL, RETRIEVE, SUP, USE
from .base import Method, MethodResult, hits_brief, step_record

USE_WEIGHTS = (-1.0, -0.5, 0.0, 0.5, 1.0)
_REFLECTION = re.compile(r"\[(?:Retrieval|No Retrieval|Retrieve|Continue to Use Evidence|Relevant|"
                         r"Irrelevant|Fully supported|Partially supported|No support / Contradictory|"
                         r"Utility:\d)\]|</?paragraph>|</s>")


def is_self_rag_model(name: str) -> bool:
    return "selfrag" in re.sub(r"[^a-z]", "", (name or "").lower())


def clean(text: str) -> str:
    return _REFLECTION.sub("", text).strip()


class SelfRAG(Method):
    name = "self_rag"
    DEFAULTS = {"threshold": 0.2, "ndocs": 3, "w_rel": 1.0, "w_sup": 1.0, "w_use": 0.5,
                "max_new_tokens": 100}

    def __init__(self, backend, searcher, dataset_name, settings=None):
        if not is_self_rag_model(getattr(backend, "name", "")):
            raise DataMissingError(
                f"Self-RAG needs its own checkpoint, but the backend runs '{getattr(backend, 'name', '?')}'",
                setting="model.paths.selfrag-llama2-7b",
                fix="download selfrag/selfrag_llama2_7b, point model.paths.selfrag-llama2-7b at "
                    "it and select the Self-RAG model for this method")
        super().__init__(backend, searcher, dataset_name, settings)

    @staticmethod
    def prompt(question: str) -> str:
        return f"### Instruction:\n{question}\n\n### Response:\n"

    def _probs(self, prefix: str, options) -> list[float]:
        """Probabilities of each option token after `prefix`, normalised over the options."""
        lps = [sum(self.backend.score(prefix, opt).logprobs) for opt in options]
        top = max(lps)
        ps = [math.exp(lp - top) for lp in lps]
        return [p / sum(ps) for p in ps]

    def _candidate(self, base: str, hit) -> dict:
        s = self.settings
        prefix = f"{base}{RETRIEVE}<paragraph>{hit.title}\n{hit.text}</paragraph>"
        gen = self.backend.generate(prefix, max_new_tokens=s["max_new_tokens"])
        text = gen.text
        rel = self._probs(prefix, REL)[0]
        rel_tok = next((t for t in REL if text.startswith(t)), REL[int(rel < 0.5)])
        body = text[len(rel_tok):] if text.startswith(rel_tok) else text
        cut = min([body.find(t) for t in SUP if t in body] or [len(body)])
        answer_part = body[:cut]
        sup_prefix = prefix + rel_tok + answer_part
        p_sup = self._probs(sup_prefix, SUP)
        sup = p_sup[0] + 0.5 * p_sup[1]
        sup_tok = next((t for t in SUP if body[cut:].startswith(t)), SUP[p_sup.index(max(p_sup))])
        p_use = self._probs(sup_prefix + sup_tok, USE)
        use = sum(w * p for w, p in zip(USE_WEIGHTS, p_use))
        seq = math.exp(sum(gen.logprobs) / max(len(gen.logprobs), 1))
        score = seq + s["w_rel"] * rel + s["w_sup"] * sup + s["w_use"] * use
        return {"id": hit.id, "answer": clean(answer_part), "raw": text, "seq": seq, "isrel": rel,
                "issup": sup, "isuse": use, "score": score}

    def _without_passages(self, base: str, trace: list, p_ret: float, n_retrievals: int,
                          **extra) -> MethodResult:
        gen = self.backend.generate(base + NO_RETRIEVE, max_new_tokens=self.settings["max_new_tokens"])
        trace.append(step_record("no_retrieval", base, gen.text))
        return MethodResult(answer=clean(gen.text), raw_output=gen.text, trace=trace,
                            n_retrievals=n_retrievals, extra={"p_retrieval": p_ret, **extra})

    def answer(self, record) -> MethodResult:
        s, base = self.settings, self.prompt(record.question)
        p_ret = self._probs(base, (RETRIEVE, NO_RETRIEVE))[0]
        trace = [step_record("retrieve_decision", base, "", p_retrieval=p_ret,
                             threshold=s["threshold"], retrieve=p_ret > s["threshold"])]
        if p_ret <= s["threshold"]:
            return self._without_passages(base, trace, p_ret, n_retrievals=0)
        hits = self.search(record.question, s["ndocs"])
        if not hits:
            # No passage to critique (a query with no BM25 hit). The official short-form code would
            # fail here (it ranks the passages' continuations, and there are none); its answer
            # whenever it does not retrieve is the continuation after [No Retrieval], so that is
            # the answer. The search was made: it counts as a retrieval, as the official count does.
            trace.append(step_record("no_hits", record.question, "", hits=[]))
            return self._without_passages(base, trace, p_ret, n_retrievals=1, no_hits=True)
        cands = [self._candidate(base, h) for h in hits]
        best = max(cands, key=lambda c: c["score"])   # first wins ties
        trace.append(step_record("candidates", base, best["raw"], hits=hits_brief(hits),
                                 candidates=cands, chosen=best["id"]))
        return MethodResult(answer=best["answer"], raw_output=best["raw"], trace=trace,
                            n_retrievals=1, extra={"p_retrieval": p_ret, "chosen": best["id"]})
