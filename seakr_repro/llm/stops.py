"""Where a continuation stops: shared by every backend so that they cut text identically.

Stop strings are searched in the generated text only (as vLLM, the official engine, does). The
returned text is cut before the first stop string; the token list keeps the longest prefix of
tokens whose text lies entirely before it, so a stop string's tokens never enter a vector's
sequence.
"""
from __future__ import annotations

from typing import Callable, Sequence


def find_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest stop string in `text`, or -1."""
    hits = [text.find(s) for s in stop if s and s in text]
    return min(hits) if hits else -1


def cut_at_stop(decode: Callable[[Sequence[int]], str], ids: Sequence[int],
                stop: Sequence[str]) -> tuple[str, int]:
    """(text before the first stop string, number of tokens kept) of the decoded `ids`."""
    text = decode(ids)
    n = len(ids)
    at = find_stop(text, stop)
    if at < 0:
        return text, n
    text = text[:at]
    while n > 0 and not text.startswith(decode(ids[:n])):
        n -= 1
    return text, n
