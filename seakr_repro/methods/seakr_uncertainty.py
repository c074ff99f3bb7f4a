"""U(c) for SeaKR's decisions with any estimator of the ablation (Table 3).

Every value is *oriented* (higher = more uncertain, `uncertainty.oriented`), so one rule serves
all estimators: retrieve when U > delta, re-rank and reason by the lowest U. For energy that means
U = -mean logsumexp (the code's sign flipped); its delta must be given on that scale.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import uncertainty as unc
from ..errors import UserError

ESTIMATORS = ("eigen", "perplexity", "multi_perplexity", "ln_entropy", "ln_entropy_official",
              "energy", "prompt")
DEFAULT_DELTAS = {"eigen": -6.0}   # the official threshold; others must be calibrated


def resolve_layer(layer: Any, backend) -> int | None:
    """"middle" -> L/2 - 1 (15 of LLaMA-2-7B's 32), None -> the backend's default, else the int."""
    if layer == "middle":
        return int(backend.n_layers) // 2 - 1
    return None if layer is None else int(layer)


def resolve_delta(delta: Any, estimator: str) -> float:
    if isinstance(delta, Mapping):
        delta = delta.get(estimator)
    if delta is None:
        delta = DEFAULT_DELTAS.get(estimator)
    if delta is None:
        raise UserError(f"no threshold delta for the '{estimator}' estimator", setting="delta",
                        fix="pass delta (a number, or a mapping estimator -> number) calibrated "
                            "for this estimator; only eigen has the official default -6.0")
    return float(delta)


class Scorer:
    """Computes U for one context: `scorer(prompt, stop, greedy, context)`."""

    def __init__(self, backend, settings: Mapping[str, Any], question: str):
        self.backend, self.s, self.question = backend, settings, question
        self.estimator = settings["estimator"]
        if self.estimator not in ESTIMATORS:
            raise UserError(f"unknown estimator '{self.estimator}'", setting="estimator",
                            fix=f"use one of {', '.join(ESTIMATORS)}")

    @property
    def wants_stats(self) -> bool:
        return self.estimator == "energy"

    def _samples(self, prompt: str, stop):
        s = self.s
        return self.backend.sample(prompt, k=s["k"], max_new_tokens=s["sample_max_tokens"], stop=list(stop),
                                   temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"],
                                   seed=s["seed"], layer=resolve_layer(s["layer"], self.backend),
                                   hook=s["hook"])

    def __call__(self, prompt: str, stop, greedy, context: str = "") -> float:
        est, eos = self.estimator, getattr(self.backend, "eos_token_id", None)
        if est == "eigen":
            return unc.u_from_sampleset(self._samples(prompt, stop), alpha=self.s["alpha"],
                                        variant=self.s["variant"])
        if est == "perplexity":
            return unc.perplexity(unc.content_logprobs(greedy, eos))
        if est == "energy":
            return unc.oriented(unc.energy(greedy.logsumexp or []), unc.energy)
        if est == "prompt":
            return unc.prompt_uncertainty(self.backend, self.question, context).uncertainty
        fn = {"multi_perplexity": unc.multi_perplexity, "ln_entropy": unc.ln_entropy,
              "ln_entropy_official": unc.ln_entropy_official}[est]
        ss = self._samples(prompt, stop)
        return fn([unc.content_logprobs(g, eos) for g in ss.samples if g.text.strip()])
