"""One registry of the uncertainty estimators U(c): SeaKR's, and those of the ablation (Table 3).

The statistics of one context (`ContextStats`) are gathered once by whoever holds them -- the
methods' Scorer from live backend calls, steps 02/03 from the stored extraction -- with the same
functions, and `score` turns them into U (higher = more uncertain), so step 03 calibrates delta
on the very U that gates retrieval.

The "(official)" perplexity and LN-entropy are those of the authors' engine (a fork of vLLM
0.4.2; docs/faithful-and-fixed.md has their rows); the true ones stay beside them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core.errors import UserError
from . import logit_estimators as le
from .eigenscore import OFFICIAL_DELTA, eigen_score

OFFICIAL_MISSING = 1e3     # the official reasoner's value when no perplexity was computed


# ---------------------------------------------------------------------- statistics of one context
@dataclass
class GreedyStats:
    logprobs: list[float]                         # raw, of the returned tokens (EOS excluded)
    official_logprobs: list[float] | None         # the official perplexity's input (None: < 2 tokens)
    logsumexp: list[float] = field(default_factory=list)   # of the raw logits, per token


@dataclass
class SampleStats:
    nonempty: bool                                # its text is not blank
    logprobs: list[float]
    official_logprobs: list[float] | None         # from the warped log-probs


@dataclass
class ContextStats:
    greedy: GreedyStats | None = None
    samples: list[SampleStats] | None = None
    vectors: np.ndarray | None = None        # k x d of the configured hook/layer, row i = samples[i]
    prompt: float | None = None              # the prompt estimator's judgement


def official_logprobs(gen, warped: bool) -> list[float] | None:
    """What the official perplexity averages: the output token list (the last one replaced by EOS, or
    the sampled EOS) minus its last entry; None when it has fewer than 2 tokens."""
    all_ids = gen.token_ids if gen.all_token_ids is None else gen.all_token_ids
    n_out = len(all_ids) + (gen.finish_reason == "eos")
    if n_out < 2:
        return None
    lps = gen.warped_logprobs if warped else (gen.logprobs if gen.all_logprobs is None else gen.all_logprobs)
    if lps is None:
        raise UserError("the backend returned a sample without warped log-probabilities",
                        setting="uncertainty.estimator",
                        fix="use a backend of this package (hf or vllm); a custom backend must fill "
                            "Generation.warped_logprobs for the official LN-entropy")
    return [float(x) for x in lps[:n_out - 1]]


def greedy_stats(gen, eos_token_id: int | None) -> GreedyStats:
    return GreedyStats(logprobs=le.content_logprobs(gen, eos_token_id),
                       official_logprobs=official_logprobs(gen, warped=False),
                       logsumexp=list(gen.logsumexp or []))


def sample_stats(gen, eos_token_id: int | None) -> SampleStats:
    return SampleStats(nonempty=bool(gen.text.strip()), logprobs=le.content_logprobs(gen, eos_token_id),
                       official_logprobs=official_logprobs(gen, warped=True))


def to_json(stats) -> Any:
    """GreedyStats / SampleStats (or a list of them) as JSON-able dicts (step 02's rows)."""
    return [asdict(s) for s in stats] if isinstance(stats, list) else asdict(stats)


def stats_from_row(row: Mapping[str, Any], vectors: np.ndarray | None) -> ContextStats:
    """The statistics of one step-02 question: its JSON row and its stored k x d vectors."""
    if "greedy_stats" not in row or "sample_stats" not in row:
        raise UserError(f"step 02's row for question {row.get('id')!r} predates the estimator "
                        "registry (no greedy_stats / sample_stats)",
                        fix="delete results/<profile>/02-extract-hidden-states and run notebook 02 again")
    return ContextStats(greedy=GreedyStats(**row["greedy_stats"]),
                        samples=[SampleStats(**s) for s in row["sample_stats"]],
                        vectors=vectors, prompt=row.get("prompt_uncertainty"))


# ---------------------------------------------------------------------- the estimators
def _need(stats: ContextStats, what: str, name: str):
    value = getattr(stats, what)
    if value is None:
        raise UserError(f"the '{name}' estimator needs the {what} statistics of the context",
                        fix="gather them with the registry's `needs` for this estimator")
    return value


def _eigen(stats: ContextStats, p: Mapping[str, Any]) -> float:
    samples, vectors = _need(stats, "samples", "eigen"), _need(stats, "vectors", "eigen")
    keep = np.asarray([s.nonempty for s in samples], dtype=bool)
    return eigen_score(np.asarray(vectors)[keep], alpha=p["alpha"], variant=p["variant"])


def _official_ppl(lps: list[float] | None) -> float | None:
    return None if lps is None else float(np.exp(-np.mean(np.asarray(lps, dtype=np.float64))))


def _perplexity_official(stats, p) -> float:
    ppl = _official_ppl(_need(stats, "greedy", "perplexity_official").official_logprobs)
    return OFFICIAL_MISSING if ppl is None else ppl


def _ln_entropy_official(stats, p) -> float:
    ppl = [_official_ppl(s.official_logprobs) for s in _need(stats, "samples", "ln_entropy_official")]
    ppl = [x for x in ppl if x is not None]
    return float(np.mean(ppl)) if ppl else OFFICIAL_MISSING


def _kept(stats, name):
    return [s.logprobs for s in _need(stats, "samples", name) if s.nonempty]


@dataclass(frozen=True)
class Estimator:
    name: str                        # the `estimator` setting
    display: str                     # row / column name in tables
    needs: frozenset                 # greedy | samples | vectors | prompt (| logsumexp)
    higher_is_more_uncertain: bool
    compute: Callable[[ContextStats, Mapping[str, Any]], float]


ESTIMATORS: dict[str, Estimator] = {e.name: e for e in (
    Estimator("eigen", "eigen (SeaKR)", frozenset({"samples", "vectors"}), True, _eigen),
    Estimator("perplexity_official", "perplexity (official)", frozenset({"greedy"}), True, _perplexity_official),
    Estimator("perplexity", "perplexity (true)", frozenset({"greedy"}), True,
              lambda s, p: le.perplexity(_need(s, "greedy", "perplexity").logprobs)),
    Estimator("multi_perplexity", "multi-perplexity", frozenset({"samples"}), True,
              lambda s, p: le.multi_perplexity(_kept(s, "multi_perplexity"))),
    Estimator("ln_entropy_official", "LN-entropy (official)", frozenset({"samples"}), True, _ln_entropy_official),
    Estimator("ln_entropy", "LN-entropy (true)", frozenset({"samples"}), True,
              lambda s, p: le.ln_entropy(_kept(s, "ln_entropy"))),
    Estimator("energy", "energy", frozenset({"greedy", "logsumexp"}), False,
              lambda s, p: le.energy(_need(s, "greedy", "energy").logsumexp)),
    Estimator("prompt", "prompt", frozenset({"prompt"}), True,
              lambda s, p: float(_need(s, "prompt", "prompt"))),
)}
# only eigen has an official threshold; the others are calibrated by step 03
DEFAULT_DELTAS = {"eigen": OFFICIAL_DELTA}


def get(name: str) -> Estimator:
    if name not in ESTIMATORS:
        raise UserError(f"unknown estimator '{name}'", setting="estimator",
                        fix=f"use one of {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]


def score(name: str, stats: ContextStats, params: Mapping[str, Any]) -> float:
    """U of one context, oriented (higher = more uncertain); params: eigen's alpha and variant."""
    est = get(name)
    value = float(est.compute(stats, params))
    return value if est.higher_is_more_uncertain else -value


def score_all(stats_per_context: Sequence[ContextStats], params: Mapping[str, Any],
              names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """{name: U per context} for every estimator in `names` (default: all registered)."""
    names = list(ESTIMATORS) if names is None else list(names)
    return {n: np.asarray([score(n, s, params) for s in stats_per_context], dtype=np.float64) for n in names}
