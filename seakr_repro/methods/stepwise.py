"""The step loop shared by the retrieval baselines (IRCoT, FLARE, DRAGIN) and plain CoT.

All use SeaKR's demos and prompt (so differences come from the retrieval policy, not templates),
with DRAGIN's published per-dataset few-shot count and generation length (`BASELINE_TABLE`).
One step = one greedy call stopping at ". " (or a newline once steps exist). The loop ends when a
step states "the answer is", a step is empty, max_steps is reached, or the steps together reach
`max_new_tokens` tokens (DRAGIN's generation budget). No stated answer: re-ask with
" So the answer is " appended.
"""
from __future__ import annotations

from ..evaluation import answer_from_forced, extract_answer
from ..prompts import BASE_STOPS, PromptFitter, stop_strings
from .base import BASELINE_TABLE, Method, MethodResult, hits_brief, step_record


class StepLoop(Method):
    DEFAULTS = {"n_shot": None, "max_new_tokens": None, "top_k_docs": 3, "max_steps": 10,
                "mode": "fixed"}
    want_stats = False
    want_attention = False

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        row = BASELINE_TABLE[self.family]
        for key in ("n_shot", "max_new_tokens"):
            if self.settings[key] is None:
                self.settings[key] = row[key]

    # hooks ------------------------------------------------------------------------------------
    def initial_docs(self, question: str, trace: list) -> list[str]:
        return []

    def trigger(self, question: str, steps: list[str], gen) -> tuple[str | None, dict]:
        """A query when the step must be regenerated with retrieved documents, else None."""
        return None, {}

    def next_docs(self, question: str, step: str, docs: list[str], trace: list) -> list[str]:
        return docs

    # loop -------------------------------------------------------------------------------------
    def _generate(self, prompt: str, stops, max_new_tokens: int):
        return self.backend.generate(prompt, max_new_tokens=max_new_tokens, stop=list(stops),
                                     want_stats=self.want_stats, want_attention=self.want_attention)

    def retrieve(self, query: str) -> list:
        self._n_search += 1
        return self.search(query, self.settings["top_k_docs"])

    def run(self, record) -> MethodResult:
        s, q = self.settings, record.question
        self._n_search = 0
        self._fit = PromptFitter(self.backend)   # this question's prompts fit the context
        trace: list[dict] = []
        steps: list[str] = []
        docs = self.initial_docs(q, trace)
        used = 0
        for _ in range(s["max_steps"]):
            stops = stop_strings(bool(steps), final=False)
            budget = max(1, s["max_new_tokens"] - used)
            prompt = self._fit(self.demos, q, steps, docs, s["mode"], reserve=budget)
            gen = self._generate(prompt, stops, budget)
            query, info = self.trigger(q, steps, gen)
            entry = step_record("step", prompt, gen.text, **info)
            if query is not None:
                hits = self.retrieve(query)
                docs = [h.text for h in hits]
                prompt = self._fit(self.demos, q, steps, docs, s["mode"], reserve=budget)
                gen = self._generate(prompt, stops, budget)
                entry.update(query=query, hits=hits_brief(hits), regenerated=gen.text)
            trace.append(entry)
            if not gen.text.strip():
                break
            steps.append(gen.text)
            used += len(gen.token_ids) or len(gen.tokens)
            if extract_answer(gen.text, s["mode"]) or used >= s["max_new_tokens"]:
                break
            docs = self.next_docs(q, gen.text, docs, trace)
        return self._finish(q, steps, docs, trace)

    def _finish(self, q, steps, docs, trace) -> MethodResult:
        mode = self.settings["mode"]
        text = " ".join(steps)
        answer = extract_answer(text, mode)
        if not answer:
            prompt = self._fit(self.demos, q, steps, docs, mode, suffix=" So the answer is ",
                               reserve=self.settings["max_new_tokens"])
            forced = self.backend.generate(prompt, max_new_tokens=self.settings["max_new_tokens"],
                                           stop=["\n", *BASE_STOPS])
            answer = answer_from_forced(forced.text, mode)
            trace.append(step_record("forced_answer", prompt, forced.text))
            text += f" So the answer is {forced.text}"
        return MethodResult(answer=answer or "", raw_output=text, trace=trace,
                            n_retrievals=self._n_search,
                            extra={"steps": steps, **self._fit.record()})
