"""Chain-of-thought without retrieval: SeaKR's demos and prompt, no context, one final-mode call
(the same call as SeaKR's knowledge path when nothing was retrieved)."""
from __future__ import annotations

from ..evaluation import answer_from_forced, extract_answer
from ..prompts import PromptFitter, stop_strings
from .base import Method, MethodResult, step_record


class CoT(Method):
    name = "cot"
    DEFAULTS = {"n_shot": 10, "max_new_tokens": 100, "mode": "fixed"}

    def run(self, record) -> MethodResult:
        s = self.settings
        fit = PromptFitter(self.backend)     # demonstrations dropped only if the context is short
        prompt = fit(self.demos, record.question, reserve=s["max_new_tokens"])
        stops = stop_strings(False, final=True)
        gen = self.backend.generate(prompt, max_new_tokens=s["max_new_tokens"], stop=stops)
        trace = [step_record("cot", prompt, gen.text)]
        answer, raw = extract_answer(gen.text, s["mode"]), gen.text
        if not answer:
            first = "" if s["mode"] == "faithful" else gen.text
            reask = fit(self.demos, record.question, suffix=first + " So the answer is ",
                        reserve=s["max_new_tokens"])
            forced = self.backend.generate(reask, max_new_tokens=s["max_new_tokens"],
                                           stop=[*stops, "\n"])
            answer = answer_from_forced(forced.text, s["mode"])
            trace.append(step_record("forced_answer", reask, forced.text))
            raw += f" So the answer is {forced.text}"
        return MethodResult(answer=answer or "", raw_output=raw, trace=trace, n_retrievals=0,
                            extra=fit.record())
