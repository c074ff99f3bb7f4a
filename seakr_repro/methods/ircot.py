"""IRCoT (Trivedi et al.): retrieve top-3 with the question first, then with every new step;
the context accumulates the distinct paragraphs (IRCoT caps it at 15)."""
from __future__ import annotations

from .base import hits_brief
from .stepwise import StepLoop


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
