"""Prompts that fit the model's context: one rule for every method and both backends.

When the prompt plus the tokens a call may generate exceed the backend's `max_context`, the OLDEST
passages are dropped first, then few-shot demonstrations from the front; if question and steps
alone do not fit, ContextOverflowError (nothing is truncated silently). What was dropped is
recorded in the run row as `extra.prompt_overflow`.
"""
from __future__ import annotations

import threading
from typing import Sequence

from ..llm.tokenizing import check_fits
from .examples import Demo
from .seakr import build_prompt


class PromptFitter:
    """`fitter(demos, question, steps, docs, mode, reserve=n, suffix=s)`: `build_prompt(...) + suffix`
    fitted with `reserve` generated tokens (whole without the backend's `max_context`/`count_tokens`)."""

    def __init__(self, backend):
        self.max_context = getattr(backend, "max_context", None)
        self.count = getattr(backend, "count_tokens", None)
        self.model = getattr(backend, "name", "the model")
        self._lock = threading.Lock()        # SeaKR scores its candidates concurrently on vLLM
        self.shortened = self.max_docs = self.max_demos = 0

    def __call__(self, demos: Sequence[Demo], question: str, steps: Sequence[str] = (),
                 docs: Sequence[str] = (), mode: str = "fixed", *, reserve: int, suffix: str = "") -> str:
        prompt = build_prompt(demos, question, steps, docs, mode) + suffix
        if self.max_context is None or self.count is None:
            return prompt
        demos, docs = list(demos), list(docs)
        n_docs = n_demos = 0
        while (n := self.count(prompt)) + reserve > self.max_context:
            if docs:
                docs.pop(0)
                n_docs += 1
            elif demos:
                demos.pop(0)
                n_demos += 1
            else:
                check_fits(n, reserve, self.max_context, self.model)   # raises
            prompt = build_prompt(demos, question, steps, docs, mode) + suffix
        if n_docs or n_demos:
            with self._lock:
                self.shortened += 1
                self.max_docs = max(self.max_docs, n_docs)
                self.max_demos = max(self.max_demos, n_demos)
        return prompt

    def record(self) -> dict:
        """For the run row: {} when nothing was dropped, else how many prompts were shortened and
        the most passages / demonstrations dropped from one of them."""
        if not self.shortened:
            return {}
        return {"prompt_overflow": {"prompts_shortened": self.shortened, "max_passages_dropped": self.max_docs,
                                    "max_demos_dropped": self.max_demos}}
