"""U(c) for SeaKR's decisions with any estimator of the registry (`uncertainty.registry`), the
same code step 03 calibrates delta with. Every value is oriented (higher = more uncertain), so one
rule serves all estimators: retrieve when U > delta, re-rank and reason by the lowest U. For energy
that means U = -mean logsumexp (the code's sign flipped); its delta must be given on that scale.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ... import uncertainty as unc
from ...core.errors import UserError
from ...llm.sampling_settings import Sampling
from ...uncertainty import registry


def resolve_delta(delta: Any, estimator: str) -> float:
    if isinstance(delta, Mapping):
        delta = delta.get(estimator)
    if delta is None:
        delta = registry.DEFAULT_DELTAS.get(estimator)
    if delta is None:
        raise UserError(f"no threshold delta for the '{estimator}' estimator", setting="delta",
                        fix="pass delta (a number, or a mapping estimator -> number) calibrated for this estimator "
                            "(notebook 03 writes them); only eigen has the official default -6.0")
    return float(delta)


def context_stats(estimator: registry.Estimator, backend, greedy, sampleset=None,
                  prompt_judgement: float | None = None) -> registry.ContextStats:
    """The statistics `estimator` needs, from a greedy Generation and a SampleSet."""
    eos = getattr(backend, "eos_token_id", None)
    stats = registry.ContextStats(prompt=prompt_judgement)
    if "greedy" in estimator.needs:
        stats.greedy = registry.greedy_stats(greedy, eos)
    if "samples" in estimator.needs:
        stats.samples = [registry.sample_stats(g, eos) for g in sampleset.samples]
        stats.vectors = sampleset.vectors
    return stats


class Scorer:
    """Computes U for one context: `scorer(prompt, stop, greedy, context)`."""

    def __init__(self, backend, settings: Mapping[str, Any], question: str):
        self.backend, self.s, self.question = backend, settings, question
        self.estimator = registry.get(settings["estimator"])
        s = settings     # the k samples' settings, checked against the model here (SeaKR's setup builds a Scorer)
        self.k_samples = Sampling(k=s["k"], max_new_tokens=s["sample_max_tokens"], temperature=s["temperature"],
                                  top_k=s["top_k"], top_p=s["top_p"], seed=s["seed"], layer=s["layer"],
                                  hook=s["hook"], forced_eos=s["forced_eos"]).at_layer(backend.n_layers)

    @property
    def wants_stats(self) -> bool:
        return "logsumexp" in self.estimator.needs

    def __call__(self, prompt: str, stop, greedy, context: str = "") -> float:
        return self.many([prompt], stop, [greedy], [context])[0]

    @property
    def wants_samples(self) -> bool:
        return "samples" in self.estimator.needs

    def sampling(self, stop) -> Sampling:
        """The settings of this estimator's k samples with these stop strings."""
        return replace(self.k_samples, stop=stop)

    def many(self, prompts, stop, greedies, contexts) -> list[float]:
        """U of independent contexts (same stops), sampled in one `sample_many` batch (= one `sample` each)."""
        sets = (self.backend.sample_many(list(prompts), self.sampling(stop))
                if self.wants_samples else [None] * len(prompts))
        return self.from_samples(greedies, sets, contexts)

    def from_samples(self, greedies, sets, contexts) -> list[float]:
        """U of each context from its greedy Generation and SampleSet (None when not needed)."""
        est = self.estimator
        out = []
        for greedy, ss, context in zip(greedies, sets, contexts):
            judgement = (unc.prompt_uncertainty(self.backend, self.question, context).uncertainty
                         if "prompt" in est.needs else None)
            out.append(registry.score(est.name, context_stats(est, self.backend, greedy, ss, judgement), self.s))
        return out
