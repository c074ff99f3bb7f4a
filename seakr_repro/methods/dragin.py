"""DRAGIN (Su et al.): retrieval triggered by real-time information needs.

Per sentence of a step, each word's score is (its last-layer attention received, max over heads,
normalised over the sentence's words) x (mean entropy of its tokens) x (number of words); a
content word (NOUN ADJ VERB PROPN NUM) scoring above the threshold triggers retrieval; sentences of
<= 3 words and steps mentioning "answer" are skipped (as DRAGIN's code does).

Query: DRAGIN ranks the words of question + text by the attention the flagged tokens pay them,
which needs a full attention pass the backend protocol does not expose. Here the question's content
words are always kept and the rest of the keep-k budget goes to the step's non-flagged content
words with the most attention received (`Generation.attention`), in text order.
"""
from __future__ import annotations

from ..errors import UserError
from .base import BASELINE_TABLE
from .stepwise import StepLoop
from .text import align_words, nlp

REAL_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM"})


def word_scores(text: str, tokens: list[str], attention: list[float], entropies: list[float]):
    """Per sentence: [(word, attention, entropy, score, is_content)]."""
    out = []
    for sent in align_words(text, tokens):
        attn = [sum(attention[i] for i in idx) for _, idx in sent]
        ent = [sum(entropies[i] for i in idx) / len(idx) for _, idx in sent]
        total, n = sum(attn), len(sent)
        rows = []
        for (w, _), a, h in zip(sent, attn, ent):
            norm = a / total if total > 0 else 0.0
            rows.append((w.text, a, h, norm * h * n, w.pos_ in REAL_POS))
        out.append(rows)
    return out


class DRAGIN(StepLoop):
    name = "dragin"
    DEFAULTS = {**StepLoop.DEFAULTS, "threshold": None, "keep_top_k": None}
    want_stats = True
    want_attention = True

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        row = BASELINE_TABLE[self.family]
        if self.settings["threshold"] is None:
            self.settings["threshold"] = row["dragin_threshold"]
        if self.settings["keep_top_k"] is None:
            self.settings["keep_top_k"] = row["dragin_keep_top_k"]

    def trigger(self, question, steps, gen):
        if "answer" in gen.text.lower() or not gen.text.strip():
            return None, {}
        if gen.attention is None or gen.entropies is None:
            raise UserError("DRAGIN needs per-token attention and entropies from the backend",
                            setting="model.backend", fix="use a backend that supports want_attention "
                            "and want_stats (the transformers backend)")
        sents = word_scores(gen.text, gen.tokens, gen.attention, gen.entropies)
        thr = self.settings["threshold"]
        for i, rows in enumerate(sents):
            if len(rows) <= 3:
                continue
            flagged = {j for j, r in enumerate(rows) if r[4] and r[3] > thr}
            if flagged:
                info = {"scores": [[r[0], round(r[3], 4)] for r in rows],
                        "flagged": [rows[j][0] for j in sorted(flagged)]}
                return self._query(question, sents[:i], rows, flagged), info
        return None, {}

    def _query(self, question, before, rows, flagged) -> str:
        k = self.settings["keep_top_k"]
        q_words = [t.text for t in nlp()(question) if t.pos_ in REAL_POS][:k]
        pool = [(r[1], pos, r[0]) for pos, r in enumerate([x for s in before for x in s])
                if r[4]]
        base = len(pool)
        pool += [(r[1], base + j, r[0]) for j, r in enumerate(rows) if r[4] and j not in flagged]
        top = sorted(pool, key=lambda t: -t[0])[:max(0, k - len(q_words))]
        return " ".join(q_words + [w for _, _, w in sorted(top, key=lambda t: t[1])])
