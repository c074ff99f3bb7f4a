"""What the baselines share when they run as DRAGIN's code runs them (`baselines.mode: faithful`).

SeaKR's Table 1 takes its CoT, IR-CoT, FLARE and DRAGIN rows from DRAGIN's runs, so `faithful`
reproduces DRAGIN's `src/generate.py` + `src/eval.py` for LLaMA-2-7b-chat:
- the prompt: every demo "Question: q\\nAnswer: s1 s2 So the answer is a." followed by "\\n" (steps
  keep their periods), then, with documents, "Context:\\n[1] d\\n[2] d\\n" and the instruction line,
  then "Question: q\\nAnswer:" and the text generated so far;
- generation in chunks of `max_new_tokens` (DRAGIN's generate_max_length) with no stop string;
- the text grows until it holds more than `max_new_tokens` tokens, stops growing, or contains
  "the answer is";
- scoring with DRAGIN's own extraction (`evaluation.extraction.dragin_*`), whose re-ask is a
  20-token call on the same prompt.
Not reproduced: HotpotQA's one-line instruction above the question (the package does not copy the
official prompt text); the demos are the package's (`prompts.demos_for`).
"""
from __future__ import annotations

from typing import Sequence

from ..evaluation.extraction import (
    DRAGIN_REASK,
    DRAGIN_REASK_TOKENS,
    dragin_answer,
    dragin_needs_reask,
    dragin_reasked,
    dragin_trim,
)
from ..prompts.examples import Demo
from .base import step_record
from .text import nlp

INSTRUCTION_LINE = "Answer in the same format as before.\n"
QUERY_MAX_TOKENS = 64     # DRAGIN's retriever keeps the last 64 tokens of a query


def demo_block(demos: Sequence[Demo]) -> str:
    return "".join(f"Question: {d.question}\nAnswer: {' '.join(d.steps)} So the answer is "
                   f"{d.answer}.\n" for d in demos)


def case(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def context(docs: Sequence[str], instruction: str = INSTRUCTION_LINE) -> str:
    return "Context:\n" + "".join(f"[{i + 1}] {d}\n" for i, d in enumerate(docs)) + instruction


def sentences_of(text: str) -> list[str]:
    """spaCy's sentences of `text`, stripped, empty ones dropped (as DRAGIN splits)."""
    return [s for s in (sent.text.strip() for sent in nlp()(text).sents) if s]


def first_sentence(text: str) -> str:
    sents = sentences_of(text)
    return sents[0] if sents else ""


def finished(backend, text: str, max_new_tokens: int, old_len: int) -> bool:
    """DRAGIN's end of the generation loop."""
    return (backend.count_tokens(text) > max_new_tokens or len(text) <= old_len
            or "the answer is" in text)


def finish(method, question: str, text: str, trace: list) -> tuple[str, str]:
    """(answer, scored prediction) of a generated text, as DRAGIN's evaluation scores it."""
    trimmed = dragin_trim(text.strip())
    final = trimmed
    if dragin_needs_reask(trimmed):
        prompt = demo_block(method.demos) + case(question) + " " + trimmed + DRAGIN_REASK
        forced = method.backend.generate(prompt, max_new_tokens=DRAGIN_REASK_TOKENS, stop=[])
        trace.append(step_record("forced_answer", prompt, forced.text))
        final = dragin_reasked(trimmed, forced.text)
    return dragin_answer(final, method.family), final
