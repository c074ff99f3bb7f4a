"""FLARE as DRAGIN re-implemented it for complex QA ("token" method, sentence solver "avg").

faithful (DRAGIN's `TokenRAG`): the first sentence of the chunk whose tokens' mean (1 - p) exceeds
the threshold is flagged (docs/faithful-and-fixed.md, "FLARE's sentence test"); its tokens over the
threshold cut out, the rest is the query; the text before it is kept, the regeneration appended.
fixed (the step loop): a step whose mean (1 - p) over its non-blank tokens exceeds the threshold is
regenerated with the documents retrieved by the step without its flagged tokens.
Neither mode skips short sentences or steps that mention "answer".
"""
from __future__ import annotations

import math

from .base import BASELINE_TABLE
from .dragin_code import sentences_of
from .stepwise import StepLoop

MASK = "[xxx]"


def flare_query(tokens: list[str], logprobs: list[float], threshold: float) -> tuple[float, str, list[str]]:
    """fixed: (mean 1-p over non-blank tokens, the masked query, the flagged tokens)."""
    risks = [1.0 - math.exp(lp) for lp in logprobs]
    scored = [r for t, r in zip(tokens, risks) if t.strip()]
    mean = sum(scored) / len(scored) if scored else 0.0
    kept = [t for t, r in zip(tokens, risks) if not (t.strip() and r > threshold)]
    flagged = [t.strip() for t, r in zip(tokens, risks) if t.strip() and r > threshold]
    return mean, " ".join("".join(kept).split()), flagged


def flare_flagged_sentence(text: str, tokens: list[str], logprobs: list[float],
                           threshold: float) -> tuple[str, str, float] | None:
    """faithful: (sentences before, the flagged sentence with its risky tokens masked, its mean
    1 - p) for the first sentence over the threshold, or None."""
    sents = sentences_of(text)
    tid = 0
    for sid, sent in enumerate(sents):
        pos, tr = 0, tid
        while tr < len(tokens):
            found = sent[pos:].find(tokens[tr])
            if found == -1:
                break
            pos = found + len(tokens[tr])
            tr += 1
        risks = [1.0 - math.exp(v) for v in logprobs[tid:tr + 1]]
        mean = sum(risks) / len(risks) if risks else math.nan
        if mean > threshold:
            before = "" if sid == 0 else " ".join(sents[:sid])
            curr, pos = sent, 0
            for risk, tok in zip(risks, tokens[tid:tr + 1]):
                at = curr[pos:].find(tok) + pos
                if risk > threshold:
                    curr = curr[:at] + MASK + curr[at + len(tok):]
                    pos = at + len(MASK)
                else:
                    pos = at + len(tok)
            return before, curr, mean
        tid = tr + 1
    return None


class FLARE(StepLoop):
    name = "flare"
    DEFAULTS = {**StepLoop.DEFAULTS, "threshold": None}

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        if self.settings["threshold"] is None:
            self.settings["threshold"] = BASELINE_TABLE[self.family]["flare_threshold"]

    def detect(self, question, text, gen):
        hit = flare_flagged_sentence(gen.text, gen.tokens, gen.logprobs, self.settings["threshold"])
        if hit is None:
            return None
        before, masked, mean = hit
        return before, masked.replace(MASK, ""), {"mean_1mp": round(mean, 4), "masked": masked}

    def trigger(self, question, steps, gen):
        if not gen.tokens:
            return None, {}
        mean, query, flagged = flare_query(gen.tokens, gen.logprobs, self.settings["threshold"])
        info = {"mean_1mp": round(mean, 4), "flagged": flagged}
        if mean <= self.settings["threshold"]:
            return None, info
        return (query or question), info
