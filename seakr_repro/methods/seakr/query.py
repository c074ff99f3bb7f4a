"""SeaKR's query formulation (facts, step 2) from the greedy pseudo-step that failed the U test.

Keep a word of the step if it occurs in the question or in the previous step (substring tests, as
in the code), or if its least likely token has 1 - p <= prob_threshold (0.1); keep only content
words (NOUN ADJ VERB PROPN NUM ADV, minus thus/answer/is/so, POS re-tagged on the kept words as the
code does); fall back to the question's content words; keep the last `max_tokens` (64) tokens.

faithful: only the LAST sentence of the step contributes, and only ASCII letters and digits count
in a token or word; fixed: every sentence, any Unicode letter (docs/faithful-and-fixed.md, "Query
of a failed step" and "Words the query counts"). `engine_view` gives the greedy tokens as the
official engine hands them to the query builder.
"""
from __future__ import annotations

import math
from typing import Callable

from ..text import ASCII_ALNUM, ALNUM, align_words, content_words


def engine_view(gen, forced_eos: str, mode: str = "fixed") -> tuple[list[str], list[float]]:
    """The greedy step's token texts and log-probs as the query builder reads them. faithful: the
    engine's whole token list, to the token that completed the stop string (a token the cut splits
    is kept with its text before the cut); with `replace_last` its last token is overwritten by EOS
    (text "", log-prob 0), a sampled EOS left alone. fixed: the returned text's own tokens only
    (docs/faithful-and-fixed.md, "Tokens the query reads")."""
    tokens, logprobs = list(gen.tokens), list(gen.logprobs)
    all_ids, n = gen.all_token_ids, len(tokens)
    overwrite = forced_eos == "replace_last" and gen.finish_reason != "eos"
    if all_ids is None or len(all_ids) == len(gen.token_ids):       # nothing cut
        if overwrite and gen.finish_reason == "length" and tokens:
            tokens[-1], logprobs[-1] = "", 0.0
        return tokens, logprobs
    rest = gen.text[len("".join(tokens)):]
    split_is_last = n == len(all_ids) - 1
    if mode == "faithful" and rest and gen.all_logprobs and not (overwrite and split_is_last):
        tokens.append(rest)
        logprobs.append(gen.all_logprobs[n])
    return tokens, logprobs


def kept_words(text: str, tokens: list[str], logprobs: list[float], question: str,
               previous_step: str | None, prob_threshold: float, ascii_only: bool = False
               ) -> list[list[dict]]:
    """Per sentence, each aligned word with its max(1 - p) and whether it is kept (`ascii_only`:
    only tokens and words with an ASCII letter or digit count, as the official code)."""
    out = []
    for sent in align_words(text, tokens, ASCII_ALNUM if ascii_only else ALNUM):
        rows = []
        for word, idx in sent:
            risk = max(1.0 - math.exp(logprobs[i]) for i in idx)
            w = word.text
            keep = w in question or bool(previous_step and w in previous_step) or risk <= prob_threshold
            rows.append({"word": w, "max_1mp": round(risk, 4), "kept": keep})
        out.append(rows)
    return out


def truncate_tokens(query: str, max_tokens: int, count_tokens: Callable[[str], int] | None) -> str:
    """The longest suffix of whole words with at most `max_tokens` tokens (the code cuts on the left)."""
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
        per_sentence = kept_words(step_text, tokens, logprobs, question, previous_step, prob_threshold,
                                  ascii_only=mode == "faithful")
        info["words"] = per_sentence
        used = per_sentence[-1:] if mode == "faithful" else per_sentence
        words = [r["word"] for sent in used for r in sent if r["kept"]]
    query = content_words(" ".join(words)) if words else ""
    if not query.strip():
        query = content_words(question)
        info["fallback"] = True
    return query, info
