"""IRCoT (Trivedi et al.): retrieve with the question first, then with every new sentence.

faithful -- DRAGIN's "fix-sentence retrieval" (FS-RAG), SeaKR's Table 1 IR-CoT: each round shows
ONLY the top documents of the current query (the question, then the last sentence added; the
instruction line keeps its typo "t he"), generates `max_new_tokens` tokens without stop strings and
keeps the first sentence, the next query; DRAGIN's end rule and answer extraction.
fixed -- after IRCoT's paper: SeaKR's prompt and step loop; the context accumulates the distinct
paragraphs of every retrieval (IRCoT caps it at 15).
"""
from __future__ import annotations

from . import dragin_code
from .base import MethodResult, hits_brief, step_record
from .stepwise import StepLoop, faithful_extra

FS_RAG_INSTRUCTION = "Answer in t he same format as before.\n"


class IRCoT(StepLoop):
    name = "ircot"
    DEFAULTS = {**StepLoop.DEFAULTS, "max_context_docs": 15}

    def _add(self, query: str, docs: list[str], trace: list, kind: str) -> list[str]:
        hits = self.retrieve(query)
        trace.append({"kind": kind, "query": query, "hits": hits_brief(hits)})
        merged = list(docs)
        for h in hits:
            if h.text not in merged:
                merged.append(h.text)
        return merged[-self.settings["max_context_docs"]:]

    def initial_docs(self, question, trace):
        return self._add(question, [], trace, "retrieve_question")

    def next_docs(self, question, step, docs, trace):
        return self._add(step, docs, trace, "retrieve_step")

    def run_faithful(self, record) -> MethodResult:
        q, n = record.question, self.settings["max_new_tokens"]
        demos, case = self.dragin_prompt[0], self.dragin_prompt[1].case(q)
        trace: list[dict] = []
        text, query = "", q
        while True:
            old_len = len(text)
            hits = self.retrieve(query)
            docs = [h.text for h in hits]
            prompt = demos + dragin_code.context(docs, FS_RAG_INSTRUCTION) + case + " " + text
            new = self._generate(prompt, (), n).text.strip()
            sents = dragin_code.sentences_of(new)
            trace.append(step_record("sentence", prompt, new, query=query, hits=hits_brief(hits),
                                     kept=sents[0] if sents else ""))
            if not sents:
                break
            text = text.strip() + " " + sents[0]
            query = sents[0]
            if dragin_code.finished(self.backend, text, n, old_len):
                break
        answer, final = dragin_code.finish(self, q, text, trace)
        return MethodResult(answer=answer, raw_output=final, trace=trace,
                            n_retrievals=self.q.n_search, extra={"text": text, **faithful_extra(self)})
