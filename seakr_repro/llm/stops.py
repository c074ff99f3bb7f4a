"""Where a continuation stops: shared by every backend so that they cut text identically.

Stop strings are searched in the generated text only (as vLLM, the official engine, does), on the
text decoded in context (`tokenizing.decode_pieces`). The returned text is cut before the first
stop string; the token list keeps the longest prefix of tokens whose text lies entirely before
it, so a stop string's tokens never enter a vector's sequence.
"""
from __future__ import annotations

from typing import Sequence


def find_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest stop string in `text`, or -1."""
    hits = [text.find(s) for s in stop if s and s in text]
    return min(hits) if hits else -1


def cut_at_stop(pieces: Sequence[str], stop: Sequence[str]) -> tuple[str, int]:
    """(text before the first stop string, number of tokens kept), from each token's text."""
    text = "".join(pieces)
    at = find_stop(text, stop)
    if at < 0:
        return text, len(pieces)
    n = end = 0
    while n < len(pieces) and end + len(pieces[n]) <= at:
        end += len(pieces[n])
        n += 1
    while n > 0 and pieces[n - 1] == "":
        n -= 1    # bytes of a character that is completed only after the cut
    return text[:at], n
