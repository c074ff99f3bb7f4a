"""SeaKR's query formulation (facts, step 2) from the greedy pseudo-step that failed the U test.

Keep a word of the step if it occurs in the question or in the previous step (substring tests, as
in the code), or if its least likely token has 1 - p <= prob_threshold (0.1); keep only content
words (NOUN ADJ VERB PROPN NUM ADV, minus thus/answer/is/so, POS re-tagged on the kept words as the
code does); fall back to the question's content words; keep the last `max_tokens` (64) tokens.

faithful: the code resets the kept-word list for every sentence, so only the LAST sentence of the
step contributes; fixed: every sentence contributes.
"""
from __future__ import annotations

import math
from typing import Callable

from ..text import align_words, content_words


def kept_words(text: str, tokens: list[str], logprobs: list[float], question: str,
               previous_step: str | None, prob_threshold: float) -> list[list[dict]]:
    """Per sentence, each aligned word with its max(1 - p) and whether it is kept."""
    out = []
    for sent in align_words(text, tokens):
        rows = []
        for word, idx in sent:
            risk = max(1.0 - math.exp(logprobs[i]) for i in idx)
            w = word.text
            keep = (w in question or bool(previous_step and w in previous_step)
                    or risk <= prob_threshold)
            rows.append({"word": w, "max_1mp": round(risk, 4), "kept": keep})
        out.append(rows)
    return out


def truncate_tokens(query: str, max_tokens: int, count_tokens: Callable[[str], int] | None) -> str:
    """The longest suffix of whole words with at most `max_tokens` tokens (the code truncates the
    tokenised query on the left)."""
    if not max_tokens or count_tokens is None or count_tokens(query) <= max_tokens:
        return query
    words = query.split()
    for start in range(1, len(words) + 1):
        tail = " ".join(words[start:])
        if count_tokens(tail) <= max_tokens:
            return tail
    return ""


def formulate_query(step_text: str, tokens: list[str], logprobs: list[float], question: str,
                    previous_step: str | None, *, prob_threshold: float = 0.1, mode: str = "fixed"
                    ) -> tuple[str, dict]:
    """The (untruncated) query and how it was built (for the trace)."""
    info: dict = {"fallback": False}
    words: list[str] = []
    if step_text.strip():
        per_sentence = kept_words(step_text, tokens, logprobs, question, previous_step,
                                  prob_threshold)
        info["words"] = per_sentence
        used = per_sentence[-1:] if mode == "faithful" else per_sentence
        words = [r["word"] for sent in used for r in sent if r["kept"]]
    query = content_words(" ".join(words)) if words else ""
    if not query.strip():
        query = content_words(question)
        info["fallback"] = True
    return query, info
