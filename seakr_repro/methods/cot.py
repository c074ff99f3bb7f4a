"""Chain-of-thought without retrieval.

faithful -- DRAGIN's "non-retrieval" (wo-RAG), SeaKR's Table 1 CoT: DRAGIN's prompt and few-shot
count, one call without stop strings, DRAGIN's answer extraction (a 20-token re-ask).
fixed -- as SeaKR's paper describes CoT: SeaKR's demos and prompt, no context, one final-mode call
(SeaKR's knowledge path with nothing retrieved), SeaKR's extractor.
"""
from __future__ import annotations

from ..evaluation import answer_from_forced, extract_answer
from ..prompts import PromptFitter, stop_strings
from . import dragin_code
from .base import BASELINE_CONFIG, BASELINE_DEFAULTS, BASELINE_TABLE, Method, MethodResult, step_record
from .stepwise import baseline_dtype, check_mode, faithful_extra, faithful_setup


class CoT(Method):
    name = "cot"
    DEFAULTS = {"n_shot": 10, "max_new_tokens": 100, **BASELINE_DEFAULTS}
    CONFIG = BASELINE_CONFIG

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        check_mode(self.settings["mode"])
        if self.settings["mode"] == "faithful":    # DRAGIN's per-dataset values unless set
            row = BASELINE_TABLE[self.family]
            for key in ("n_shot", "max_new_tokens"):
                if key not in (settings or {}) or (settings or {})[key] is None:
                    self.settings[key] = row[key]
        faithful_setup(self)

    @classmethod
    def model_dtype(cls, settings):
        return baseline_dtype(settings)

    def answer(self, record) -> MethodResult:
        if self.settings["mode"] == "faithful":
            return self._run_faithful(record)
        s, ext = self.settings, self.settings["answer_extraction"]
        fit = PromptFitter(self.backend)     # demonstrations dropped only if the context is short
        prompt = fit(self.demos, record.question, reserve=s["max_new_tokens"])
        stops = stop_strings(False, final=True)
        gen = self.backend.generate(prompt, max_new_tokens=s["max_new_tokens"], stop=stops)
        trace = [step_record("cot", prompt, gen.text)]
        answer, raw = extract_answer(gen.text, ext), gen.text
        if not answer:
            first = "" if ext == "faithful" else gen.text
            reask = fit(self.demos, record.question, suffix=first + " So the answer is ",
                        reserve=s["max_new_tokens"])
            forced = self.backend.generate(reask, max_new_tokens=s["max_new_tokens"],
                                           stop=[*stops, "\n"])
            answer = answer_from_forced(forced.text, ext)
            trace.append(step_record("forced_answer", reask, forced.text))
            raw += f" So the answer is {forced.text}"
        return MethodResult(answer=answer or "", raw_output=raw, trace=trace, n_retrievals=0,
                            extra=fit.record())

    def _run_faithful(self, record) -> MethodResult:
        q = record.question
        prompt = self.dragin_prompt[0] + self.dragin_prompt[1].case(q)
        gen = dragin_code.generate(self, prompt, self.settings["max_new_tokens"])
        trace = [step_record("cot", prompt, gen.text)]
        answer, final = dragin_code.finish(self, q, gen.text, trace)
        return MethodResult(answer=answer, raw_output=final, trace=trace, n_retrievals=0,
                            extra={"text": gen.text, **faithful_extra(self)})
