"""Chain-of-thought without retrieval: SeaKR's demos and prompt, no context, one final-mode call
(the same call as SeaKR's knowledge path when nothing was retrieved)."""
from __future__ import annotations

from ..evaluation import answer_from_forced, extract_answer
from ..prompts import build_prompt, stop_strings
from .base import Method, MethodResult, step_record


class CoT(Method):
    name = "cot"
    DEFAULTS = {"n_shot": 10, "max_new_tokens": 100, "mode": "fixed"}

    def run(self, record) -> MethodResult:
        s = self.settings
        prompt = build_prompt(self.demos, record.question)
        stops = stop_strings(False, final=True)
        gen = self.backend.generate(prompt, max_new_tokens=s["max_new_tokens"], stop=stops)
        trace = [step_record("cot", prompt, gen.text)]
        answer, raw = extract_answer(gen.text, s["mode"]), gen.text
        if not answer:
            base = prompt if s["mode"] == "faithful" else prompt + gen.text
            forced = self.backend.generate(base + " So the answer is ", max_new_tokens=s["max_new_tokens"],
                                           stop=[*stops, "\n"])
            answer = answer_from_forced(forced.text, s["mode"])
            trace.append(step_record("forced_answer", base, forced.text))
            raw += f" So the answer is {forced.text}"
        return MethodResult(answer=answer or "", raw_output=raw, trace=trace, n_retrievals=0)
