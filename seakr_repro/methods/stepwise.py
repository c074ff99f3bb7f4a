"""The loops shared by the retrieval baselines (IRCoT, FLARE, DRAGIN); `mode` picks one.

faithful -- as DRAGIN's code runs them (`dragin_code`): chunks without stop strings on DRAGIN's
prompt; the text before the sentence that needs retrieval is kept, its documents serve ONE
regeneration, and the answer is DRAGIN's extraction.
fixed -- SeaKR's demos and prompt, one step per greedy call, so the baselines differ from SeaKR only
in their retrieval policy; the loop ends when a step states an answer, is empty, or max_steps or
`max_new_tokens` is reached (then re-asked with " So the answer is ").
Both use DRAGIN's per-dataset few-shot counts and lengths (`BASELINE_TABLE`) unless the profile
sets them, and queries of their last 64 tokens (docs/faithful-and-fixed.md: each mode's rows)."""
from __future__ import annotations

from ..core.errors import UserError
from ..evaluation import answer_from_forced, extract_answer
from ..prompts import BASE_STOPS, PromptFitter, stop_strings
from . import dragin_code
from .base import (
    BASELINE_CONFIG,
    BASELINE_DEFAULTS,
    BASELINE_TABLE,
    Method,
    MethodResult,
    hits_brief,
    step_record,
)
from .seakr.query import truncate_tokens

BASELINE_MODES = ("faithful", "fixed")


class StepLoop(Method):
    CONFIG = BASELINE_CONFIG
    DEFAULTS = {"n_shot": None, "max_new_tokens": None, "top_k_docs": 3, "max_steps": 10,
                **BASELINE_DEFAULTS}
    want_stats = False
    want_attention = False
    # faithful: DRAGIN's DRAGIN joins prompt parts skipping empty ones and keeps only the first
    # sentence of a regeneration; its FLARE does neither
    join_nonempty = False
    first_sentence_only = False

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        check_mode(self.settings["mode"])
        row = BASELINE_TABLE[self.family]
        for key in ("n_shot", "max_new_tokens"):
            if self.settings[key] is None:
                self.settings[key] = row[key]
        faithful_setup(self)

    @classmethod
    def model_dtype(cls, settings):
        return baseline_dtype(settings)

    # hooks ------------------------------------------------------------------------------------
    def initial_docs(self, question: str, trace: list) -> list[str]:
        return []

    def trigger(self, question: str, steps: list[str], gen) -> tuple[str | None, dict]:
        """fixed: a query when the step must be regenerated with retrieved documents, else None."""
        return None, {}

    def detect(self, question: str, text: str, gen) -> tuple[str, str, dict] | None:
        """faithful: (text before the flagged sentence, query, trace info), or None."""
        return None

    def next_docs(self, question: str, step: str, docs: list[str], trace: list) -> list[str]:
        return docs

    # shared -----------------------------------------------------------------------------------
    def _generate(self, prompt: str, stops, max_new_tokens: int, stats: bool = True):
        if self.settings["mode"] == "faithful":
            return dragin_code.generate(self, prompt, max_new_tokens, stats=self.want_stats and stats,
                                        attention=self.want_attention and stats)
        return self.backend.generate(prompt, max_new_tokens=max_new_tokens, stop=list(stops),
                                     want_stats=self.want_stats and stats,
                                     want_attention=self.want_attention and stats)

    def retrieve(self, query: str) -> list:
        self.q.n_search += 1
        if self.settings["mode"] == "faithful":
            query = dragin_code.truncate_query(self.backend, query)
        else:
            query = truncate_tokens(query, dragin_code.QUERY_MAX_TOKENS,
                                    getattr(self.backend, "count_tokens", None))
        return self.search(query, self.settings["top_k_docs"])

    def answer(self, record) -> MethodResult:
        if self.settings["mode"] == "faithful":
            return self.run_faithful(record)
        return self.run_fixed(record)

    # faithful ---------------------------------------------------------------------------------
    def _join(self, *parts: str) -> str:
        return " ".join(p for p in parts if p) if self.join_nonempty else " ".join(parts)

    def run_faithful(self, record) -> MethodResult:
        s, q = self.settings, record.question
        demos, case = self.dragin_prompt[0], self.dragin_prompt[1].case(q)
        n = s["max_new_tokens"]
        trace: list[dict] = []
        text = ""
        while True:
            old_len = len(text)
            prompt = demos + self._join(case, text)
            gen = self._generate(prompt, (), n)
            found = self.detect(q, text, gen)
            entry = step_record("chunk", prompt, gen.text)
            if found is None:
                text = text.strip() + " " + gen.text.strip()
            else:
                before, query, info = found
                hits = self.retrieve(query)
                docs = [h.text for h in hits]
                prompt = demos + dragin_code.context(docs) + self._join(case, text, before.strip())
                new = self._generate(prompt, (), n, stats=False).text
                if self.first_sentence_only:
                    new = dragin_code.first_sentence(new)
                text = self._join(text.strip(), before.strip(), new.strip())
                entry.update(info, kept=before, query=query, hits=hits_brief(hits), regenerated=new)
            trace.append(entry)
            if dragin_code.finished(self.backend, text, n, old_len):
                break
        answer, final = dragin_code.finish(self, q, text, trace)
        return MethodResult(answer=answer, raw_output=final, trace=trace,
                            n_retrievals=self.q.n_search, extra={"text": text, **faithful_extra(self)})

    # fixed ------------------------------------------------------------------------------------
    def run_fixed(self, record) -> MethodResult:
        s, q = self.settings, record.question
        ext = s["answer_extraction"]
        self.q.fit = PromptFitter(self.backend)   # this question's prompts fit the context
        trace: list[dict] = []
        steps: list[str] = []
        docs = self.initial_docs(q, trace)
        used = 0
        for _ in range(s["max_steps"]):
            stops = stop_strings(bool(steps), final=False)
            budget = max(1, s["max_new_tokens"] - used)
            prompt = self.q.fit(self.demos, q, steps, docs, ext, reserve=budget)
            gen = self._generate(prompt, stops, budget)
            query, info = self.trigger(q, steps, gen)
            entry = step_record("step", prompt, gen.text, **info)
            if query is not None:
                hits = self.retrieve(query)
                prompt = self.q.fit(self.demos, q, steps, [h.text for h in hits], ext, reserve=budget)
                gen = self._generate(prompt, stops, budget, stats=False)
                entry.update(query=query, hits=hits_brief(hits), regenerated=gen.text)
            trace.append(entry)
            if not gen.text.strip():
                break
            steps.append(gen.text)
            used += len(gen.token_ids) or len(gen.tokens)
            if extract_answer(gen.text, ext) or used >= s["max_new_tokens"]:
                break
            docs = self.next_docs(q, gen.text, docs, trace)
        return self._finish(q, steps, docs, trace)

    def _finish(self, q, steps, docs, trace) -> MethodResult:
        ext = self.settings["answer_extraction"]
        text = " ".join(steps)
        answer = extract_answer(text, ext)
        if not answer:
            prompt = self.q.fit(self.demos, q, steps, docs, ext, suffix=" So the answer is ",
                               reserve=self.settings["max_new_tokens"])
            forced = self.backend.generate(prompt, max_new_tokens=self.settings["max_new_tokens"],
                                           stop=["\n", *BASE_STOPS])
            answer = answer_from_forced(forced.text, ext)
            trace.append(step_record("forced_answer", prompt, forced.text))
            text += f" So the answer is {forced.text}"
        return MethodResult(answer=answer or "", raw_output=text, trace=trace,
                            n_retrievals=self.q.n_search, extra={"steps": steps, **self.q.fit.record()})


def check_mode(mode: str) -> None:
    if mode not in BASELINE_MODES:
        raise UserError(f"unknown baselines.mode '{mode}'", setting="baselines.mode",
                        fix="use 'faithful' (as DRAGIN's code runs the baselines) or 'fixed'")


def baseline_dtype(settings) -> str | None:
    """`baselines.dtype`, else float32 in faithful mode (DRAGIN loads without torch_dtype), else None."""
    if settings.get("dtype"):
        return settings["dtype"]
    return "float32" if settings.get("mode") == "faithful" else None


def faithful_setup(method) -> None:
    """A faithful baseline's prompt parts and decoding, fixed at construction (fails here, not mid-run)."""
    if method.settings["mode"] != "faithful":
        return
    method.dragin_prompt = dragin_code.prompt_parts(method)
    method.decoding = dragin_code.checkpoint_decoding(method.backend, method.settings.get("decoding"))
    method.settings["decoding"] = method.decoding      # part of the run's key (its provenance)


def faithful_extra(method) -> dict:
    """How a faithful baseline decoded, for the run row: the checkpoint's decoding and the dtype."""
    model = getattr(method.backend, "model", None)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "") if model is not None else None
    return {"decoding": dict(method.decoding), "dtype": dtype}
