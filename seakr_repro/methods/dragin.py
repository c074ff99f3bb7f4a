"""DRAGIN (Su et al.): retrieval triggered by real-time information needs, as its code runs it.

Words: the generated tokens merged into DRAGIN's words (faithful: `Backend.piece_words`, fixed:
`Backend.words`). A word's attention is the sum over its tokens of the last-layer attention each
receives (`Generation.attention`); its weight the mean entropy of its tokens. A sentence takes the
consecutive words up to the first whose run contains it (the last takes the rest); a word's score
is (attention / the sentence's total) x weight x (words in the sentence).
Trigger: faithful lets ANY word over the threshold trigger (non-content words cleared afterwards);
fixed only content words (NOUN ADJ VERB PROPN NUM). docs/faithful-and-fixed.md has both rows.

Query (both modes, DRAGIN's "real_words"): the text "question + text so far + sentences before +
the flagged sentence's words" is run through the model; for each flagged word, each of its tokens'
predicting position gives its last-layer attention (mean over heads) over the tokens before the
word, normalised to 1; these are averaged per word, summed per word of the whole text, and
averaged over the flagged words. The words that contain a content word of the whole text, minus
the flagged ones, are ranked by that attention; the top keep-k, in text order, are the query.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.errors import UserError
from .base import BASELINE_TABLE
from .dragin_code import sentences_of
from .stepwise import StepLoop
from .text import nlp

REAL_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM"})


def real_words(text: str) -> set[str]:
    return {t.text for t in nlp()(text) if t.pos_ in REAL_POS}


def contains_real(word: str, real: set[str]) -> bool:
    """DRAGIN's test: some content word is a substring of the word."""
    return any(r in word for r in real)


def flagged_sentence(text: str, words: list[str], attention: list[float], weights: list[float],
                     threshold: float, content_first: bool):
    """(sentences before, words, flags, scores) of the first sentence that triggers, or None."""
    sents = sentences_of(text)
    tid = 0
    for sid, sent in enumerate(sents):
        lo = hi = tid
        if sid == len(sents) - 1:
            hi = len(words)
        else:
            for i in range(tid + 1, len(words)):
                if sent in " ".join(words[lo:i]):
                    hi = i
                    break
            tid = hi
        att = attention[lo:hi]
        total = sum(att)
        n = hi - lo
        scores = [(a / total if total else math.nan) * weights[lo + j] * n for j, a in enumerate(att)]
        flags = [1 if v > threshold else 0 for v in scores]
        if content_first or 1 in flags:
            real = real_words(sent)
            flags = [f if contains_real(words[lo + j], real) else 0 for j, f in enumerate(flags)]
            if content_first and 1 not in flags:
                continue
            before = "" if sid == 0 else " ".join(sents[:sid])
            return before, words[lo:hi], flags, scores
    return None


def attention_query(backend, prefix: str, sentence_words: list[str], flags: list[int],
                    keep_top_k: int, words=None) -> tuple[str, dict]:
    """DRAGIN's query from the flagged words' attention over `prefix` + the sentence (module doc)."""
    all_text = prefix + " " + " ".join(sentence_words)
    ids = backend.encode(all_text)
    spans = (words or backend.words)(ids)
    start = len(spans) - len(sentence_words)
    flagged = [spans[start + j] for j, f in enumerate(flags) if f]
    positions = sorted({i - 1 for a, b, _ in flagged for i in range(a, b + 1) if i > 0})
    rows = dict(zip(positions, backend.attention_rows(ids, positions))) if positions else {}
    forward = np.zeros(len(spans))
    with np.errstate(divide="ignore", invalid="ignore"):
        for a, b, _ in flagged:
            att = np.zeros(len(ids))
            for i in range(max(a, 1), b + 1):
                v = np.asarray(rows[i - 1][:a], dtype=np.float64)
                att[:a] += v / v.sum()
            att /= (b - a + 1)
            forward += np.array([att[x:y + 1].sum() for x, y, _ in spans])
        forward = forward / len(flagged)          # no flagged word: 0/0, every value NaN
    real = real_words(all_text)
    pairs = [(float(forward[i]), w, i) for i, (_, _, w) in enumerate(spans)
             if not (i >= start and flags[i - start]) and contains_real(w, real)]
    # NaN compares false both ways, so a NaN ranking keeps text order (what the code gets)
    top = sorted(pairs, key=lambda p: p[0], reverse=True)[:min(keep_top_k, len(pairs))]
    query = " ".join(w for _, w, _ in sorted(top, key=lambda p: p[2]))
    return query, {"query_positions": positions, "n_words": len(spans)}


class DRAGIN(StepLoop):
    name = "dragin"
    DEFAULTS = {**StepLoop.DEFAULTS, "threshold": None, "keep_top_k": None}
    want_stats = True
    want_attention = True
    join_nonempty = True
    first_sentence_only = True

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        row = BASELINE_TABLE[self.family]
        if self.settings["threshold"] is None:
            self.settings["threshold"] = row["dragin_threshold"]
        if self.settings["keep_top_k"] is None:
            self.settings["keep_top_k"] = row["dragin_keep_top_k"]

    @property
    def _words(self):
        if self.settings["mode"] != "faithful":
            return self.backend.words
        words = getattr(self.backend, "piece_words", None)
        if words is None:
            raise UserError("faithful DRAGIN needs the backend's word pieces (piece_words)",
                            setting="model.backend", fix="use the transformers or vLLM backend")
        return words

    def _flag(self, gen, content_first: bool):
        if gen.attention is None or gen.entropies is None:
            raise UserError("DRAGIN needs per-token attention and entropies from the backend",
                            setting="model.backend", fix="use a backend that supports want_attention "
                            "and want_stats (transformers or vLLM)")
        spans = self._words(gen.token_ids)
        words = [w for _, _, w in spans]
        att = [sum(gen.attention[a:b + 1]) for a, b, _ in spans]
        ent = [sum(gen.entropies[a:b + 1]) / (b - a + 1) for a, b, _ in spans]
        return flagged_sentence(gen.text, words, att, ent, self.settings["threshold"], content_first)

    def _query(self, prefix: str, found) -> tuple[str, str, dict]:
        before, sent_words, flags, scores = found
        query, more = attention_query(self.backend, prefix + " " + before, sent_words, flags,
                                      self.settings["keep_top_k"], self._words)
        info = {"scores": [[w, round(v, 4)] for w, v in zip(sent_words, scores)],
                "flagged": [w for w, f in zip(sent_words, flags) if f], **more}
        return before, query, info

    def detect(self, question, text, gen):
        found = self._flag(gen, content_first=False)
        return None if found is None else self._query(question + " " + text, found)

    def trigger(self, question, steps, gen):
        if not gen.text.strip():
            return None, {}
        found = self._flag(gen, content_first=True)
        if found is None:
            return None, {}
        _before, query, info = self._query(question + " " + " ".join(steps), found)
        return query or question, info
