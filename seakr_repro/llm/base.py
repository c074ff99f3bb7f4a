"""The backend protocol every LLM implementation follows (transformers, vLLM, synthetic): methods
talk only to it, so they run unchanged on CPU, GPU or vLLM and test against a scripted backend.
`generate` is one greedy continuation with per-token log-probs (and, asked, the statistics FLARE,
DRAGIN, perplexity and energy need); `sample` is k continuations of ONE context, each with its
forced-EOS vector at one layer and hook (`Sampling`): SeaKR's U(c). DRAGIN's query also needs
`words` and `attention_rows`. `BackendExtras` lists what only some backends have; `unwrap` reaches
the model backend under any wrapper.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..core.concurrency import parallel_map, supports_concurrency
from .sampling_settings import Sampling


@dataclass
class Generation:
    """One continuation. Lists are aligned per generated token (the stop string removed)."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)        # the text each token adds, decoded in context
    logprobs: list[float] = field(default_factory=list)    # log p(token | prefix), natural log
    entropies: list[float] | None = None                   # entropy of the next-token distribution
    logsumexp: list[float] | None = None                   # logsumexp of the raw logits (energy)
    finish_reason: str = "stop"                            # stop | eos | length
    # DRAGIN: for each generated token, the last layer's attention it receives, computed as
    # DRAGIN's "max" solver does over the generated tokens alone: max over the later (query)
    # positions, then mean over heads. Filled only when attentions were asked for.
    attention: list[float] | None = None
    n_prompt_tokens: int = 0
    # Every generated token up to and including the one that ended the continuation (the token
    # that completed the stop string, or the max_tokens-th; a sampled EOS excluded), with its raw
    # log-prob: the official engine's token list, from which the forced-EOS sequence and the
    # official perplexity are built (`stops.forced_eos_ids`). None = same as token_ids.
    all_token_ids: list[int] | None = None
    all_logprobs: list[float] | None = None
    # Samples only: log-prob of each of all_token_ids under the distribution it was drawn from
    # (after temperature, top-k and top-p), which the official "LN-entropy" averages.
    warped_logprobs: list[float] | None = None


@dataclass
class SampleSet:
    """k samples of one context and their forced-EOS vectors (row i belongs to samples[i])."""

    samples: list[Generation]
    vectors: np.ndarray          # k x d, float32; rows of empty samples are still present
    layer: int
    hook: str                    # "mlp_out" | "residual" (`llm.hooks.HOOKS`, defined there)

    @property
    def nonempty_vectors(self) -> np.ndarray:
        """Vectors of the samples with non-empty text: the ones SeaKR's U(c) uses."""
        keep = [i for i, s in enumerate(self.samples) if s.text.strip()]
        return self.vectors[keep] if keep else self.vectors[:0]


@runtime_checkable
class Backend(Protocol):
    """What every backend has (`isinstance(b, Backend)` checks these)."""

    name: str                    # registry key of the model
    n_layers: int                # decoder layers (the hidden-state layers are 0 .. n_layers - 1)
    hidden_size: int             # width of a forced-EOS vector
    eos_token_id: int            # the EOS token appended/substituted for the forced-EOS vector

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        """Greedy decoding of `prompt` until a stop string, EOS or max_new_tokens."""
        ...

    def sample(self, prompt: str, settings: Sampling) -> SampleSet:
        """`settings.k` samples of one context (the prompt is pre-filled once), with forced-EOS
        vectors (`Sampling`)."""
        ...

    def sample_many(self, prompts: Sequence[str], settings: Sampling) -> list[SampleSet]:
        """`sample` for several contexts; implementations may batch them."""
        ...

    def score(self, prompt: str, continuation: str) -> Generation:
        """Teacher-forced log-probabilities (and stats) of `continuation` after `prompt`."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` as a prompt (what prompt fitting and cost counts use)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as a prompt is encoded (special tokens added)."""
        ...

    def words(self, token_ids: Sequence[int]) -> list[tuple[int, int, str]]:
        """DRAGIN's words of a token sequence: (first token, last token, text) each
        (`llm.attention.merge_words`)."""
        ...

    def attention_rows(self, token_ids: Sequence[int], positions: Sequence[int]) -> list[list[float]]:
        """The last layer's attention, averaged over heads, of each query position in `positions`
        over every key of `token_ids` (len(token_ids) values; 0 after the position)."""
        ...


class BackendExtras(Protocol):
    """Members only some backends have: callers read each with `getattr`/`hasattr` and the default
    given here; a `CachedBackend` passes through every one it does not define (`__getattr__`)."""

    kind: str                  # the engine ("vllm"); absent: transformers. Part of a method's result key
    concurrent: bool           # default False: calls from several threads join one batch
    fingerprint: str           # default `name`: identifies the weights; part of every call-cache key
    max_context: int | None    # default None (unknown): context length in tokens, prompts fit to it
    scoped_counts: bool        # default False: `llm.cache.counting()` counts calls per question
    wraps_backend: bool        # class attribute of wrappers: the wrapped backend is in `.backend`
    model: Any                 # transformers only: the torch model (KBAE's LoRA, the benchmarks)
    tokenizer: Any             # transformers and vLLM: the Hugging Face tokenizer
    fleet: Any                 # default None; `runs.fleet_backend.FleetBackend`'s Ray workers
    generation_config: dict | None  # the checkpoint's generation_config.json, which faithful baselines follow

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """`tokenizer.decode` with its defaults: the text as DRAGIN's code reads it."""
        ...

    def encode_plain(self, text: str) -> list[int]:
        """Token ids without special tokens."""
        ...

    def piece_words(self, token_ids: Sequence[int]) -> list[tuple[int, int, str]]:
        """`words`, each word's pieces joined as DRAGIN's code joins them (`llm.attention.merge_words`)."""
        ...

    def read_logprobs(self, prompt: str, continuation_ids: Sequence[int],
                      reads: Sequence[tuple[int, int]]) -> Generation:
        """Teacher-forced log-probs: for reads[i] = (j, t), logprobs[i] = log p(t | prompt +
        continuation_ids[:j]). Self-RAG reads its reflection tokens from the very ids it generated
        (re-encoding the text need not give them back)."""
        ...

    def stats(self) -> dict[str, int]:
        """Cumulative counters (llm_calls, oom_retries, ...) the runner differences per question."""
        ...

    def close(self) -> None:
        """Release the model's memory; the backend is unusable afterwards."""
        ...

    def reset_prefix_cache(self) -> None:
        """Forget reused prompt KV caches (benchmarks start cold)."""
        ...

    def generate_many(self, prompts: Sequence[str], *, max_new_tokens: int,
                      stop: Sequence[str] = (), want_stats: bool = False) -> list[Generation]:
        """Greedy `generate` of independent prompts as one batch (default: the function below)."""
        ...

    def generate_and_sample_many(self, prompts: Sequence[str], *, generate: dict | Sequence[dict],
                                 sample: Sampling | Sequence[Sampling]) -> list[tuple[Generation, SampleSet]]:
        """Each prompt's greedy row and its samples decoded in one batch (default: the function
        below); the call cache still stores and counts them as two calls."""
        ...

    def eos_vectors_all_layers(self, prompt: str, completions: Sequence[Sequence[int]]) -> dict:
        """The forced-EOS vector of each "prompt + completion + EOS" at every layer for both hooks:
        {"mlp_out": L x k x d, "residual": L x k x d} float32 (step 02 needs it)."""
        ...


def layers(backend: Any) -> Iterator[Any]:
    """`backend`, then each backend it wraps, down to the model backend: a `CachedBackend` or a
    `ThreadBatcher` (any wrapper that sets the class attribute `wraps_backend`) keeps the backend
    it wraps in `.backend`."""
    while backend is not None:
        yield backend
        if not getattr(type(backend), "wraps_backend", False):
            return
        backend = vars(backend)["backend"]


def unwrap(backend: Any) -> Any:
    """The model backend under any wrappers (the last of `layers`)."""
    return [None, *layers(backend)][-1]


def generate_many(backend, prompts: Sequence[str], **kwargs) -> list[Generation]:
    """Greedy `generate` of several independent prompts: one batch on a backend that has
    `generate_many` (transformers: shared-prefix decoding), side by side on a backend that joins
    concurrent calls into its batch (vLLM), else one call after another."""
    many = getattr(backend, "generate_many", None)
    if many is not None:
        return many(list(prompts), **kwargs)
    workers = len(prompts) if supports_concurrency(backend) else 1
    return parallel_map(lambda p: backend.generate(p, **kwargs), prompts, workers)


def per_prompt(settings: Any, n: int) -> list:
    """One settings dict or `Sampling` per prompt: `settings` for every prompt, or its own each."""
    if isinstance(settings, (Mapping, Sampling)):
        return [settings] * n
    out = list(settings)
    if len(out) != n:
        raise ValueError(f"{len(out)} settings for {n} prompts")
    return out


def same_settings(settings: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Indices of the prompts that share each distinct settings dict, in order of appearance."""
    groups: dict[str, list[int]] = {}
    for i, one in enumerate(settings):
        groups.setdefault(repr(_frozen(one)), []).append(i)
    return list(groups.values())


def _frozen(value: Any) -> Any:
    """`value` with every mapping's items sorted (nested too), so equal settings compare equal."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def generate_and_sample_many(backend, prompts: Sequence[str], *,
                             generate: Mapping[str, Any] | Sequence[Mapping[str, Any]],
                             sample: Sampling | Sequence[Sampling]) -> list[tuple[Generation, SampleSet]]:
    """Each prompt's greedy `generate` and its k-sample `sample` (one setting for all prompts, or
    one per prompt): one batch on a backend that has `generate_and_sample_many`,
    else, for each group of prompts with the same settings, `generate_many` (above) then
    `sample_many`."""
    both = getattr(backend, "generate_and_sample_many", None)
    if both is not None:
        return both(list(prompts), generate=generate, sample=sample)
    gens, smps = per_prompt(generate, len(prompts)), per_prompt(sample, len(prompts))
    out: list = [None] * len(prompts)
    for idx in same_settings([{"generate": g, "sample": sm} for g, sm in zip(gens, smps)]):
        ps = [prompts[i] for i in idx]
        pairs = zip(generate_many(backend, ps, **gens[idx[0]]), backend.sample_many(ps, smps[idx[0]]))
        for i, pair in zip(idx, pairs):
            out[i] = pair
    return out
