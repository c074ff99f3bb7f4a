"""FLARE with the IRCoT-style step loop, as DRAGIN ran it: a step whose mean (1 - p) over its
tokens exceeds the threshold is regenerated with the top-3 documents retrieved by the step with
its flagged tokens ((1 - p) > threshold) removed. Steps stating the answer are not checked."""
from __future__ import annotations

import math

from .base import BASELINE_TABLE
from .stepwise import StepLoop


def flare_query(tokens: list[str], logprobs: list[float], threshold: float) -> tuple[float, str, list[str]]:
    """(mean 1-p over non-blank tokens, the masked query, the flagged tokens)."""
    risks = [1.0 - math.exp(lp) for lp in logprobs]
    scored = [r for t, r in zip(tokens, risks) if t.strip()]
    mean = sum(scored) / len(scored) if scored else 0.0
    kept = [t for t, r in zip(tokens, risks) if not (t.strip() and r > threshold)]
    flagged = [t.strip() for t, r in zip(tokens, risks) if t.strip() and r > threshold]
    return mean, " ".join("".join(kept).split()), flagged


class FLARE(StepLoop):
    name = "flare"
    DEFAULTS = {**StepLoop.DEFAULTS, "threshold": None}

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        if self.settings["threshold"] is None:
            self.settings["threshold"] = BASELINE_TABLE[self.family]["flare_threshold"]

    def trigger(self, question, steps, gen):
        if "answer" in gen.text.lower() or not gen.tokens:
            return None, {}
        mean, query, flagged = flare_query(gen.tokens, gen.logprobs, self.settings["threshold"])
        info = {"mean_1mp": round(mean, 4), "flagged": flagged}
        if mean <= self.settings["threshold"]:
            return None, info
        return (query or question), info
