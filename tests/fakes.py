"""Scripted stand-ins for the LLM backend and the searcher, for fast method tests.

FakeBackend answers `generate` with `respond(prompt, stop)` (a string, or a Generation from `gen`)
and `sample` with vectors chosen by `level(prompt)` or `level(prompt, stop)`:
"low" = k identical vectors (U ~ -6.5 < -6), "high" = k random vectors (U >> -6),
"empty" = k empty samples (U = 0), or a float spread.
Every call is recorded, so tests can count LLM calls and see the prompts.
"""
from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass

import numpy as np

from seakr_repro.llm.base import Generation, SampleSet
from seakr_repro.llm.reflection_tokens import SKIPPED_IN_TEXT

SURE = math.log(0.99)
_VOCAB: dict[str, int] = {}          # fake token text <-> id, shared by gen() and FakeBackend
_PIECES: dict[int, str] = {}


def fake_ids(tokens) -> list[int]:
    out = []
    for t in tokens:
        if t not in _VOCAB:
            _VOCAB[t] = len(_VOCAB) + 1
            _PIECES[_VOCAB[t]] = t
        out.append(_VOCAB[t])
    return out


def fake_tokens(text: str) -> list[str]:
    """The fake tokenizer: whitespace-led words."""
    return re.findall(r"\s*\S+", text)


def gen(text: str, probs=None, attention=None, entropies=None, logsumexp=None) -> Generation:
    """A Generation whose tokens are the whitespace-led words of `text` (p = 0.99 unless given)."""
    tokens = fake_tokens(text)
    lps = [SURE] * len(tokens) if probs is None else [math.log(p) for p in probs]
    assert len(lps) == len(tokens), (tokens, lps)
    return Generation(text=text, token_ids=fake_ids(tokens), tokens=tokens,
                      logprobs=lps, warped_logprobs=list(lps), attention=attention, entropies=entropies,
                      logsumexp=logsumexp if logsumexp is not None else [10.0] * len(tokens))


class FakeBackend:
    n_layers = 4
    hidden_size = 16
    eos_token_id = 0
    generation_config: dict = {}      # greedy, as a checkpoint without generation_config.json

    def __init__(self, respond, level=lambda prompt: "low", score=None, name="fake-model",
                 attend=None):
        self.respond, self.level, self.score_fn, self.name = respond, level, score, name
        # attend(tokens, position) -> the attention row of `position` over `tokens` (DRAGIN's
        # query); default: uniform over the tokens up to the position
        self.attend = attend
        self.attention_calls: list[tuple[list[str], list[int]]] = []
        self.generate_calls: list[tuple[str, list[str]]] = []
        self.max_new_tokens: list[int] = []
        self.sample_calls: list[dict] = []
        self.score_calls: list[tuple[str, str]] = []

    def read_logprobs(self, prompt, continuation_ids, reads):
        """Self-RAG's reads: p = 0.5 for every token read (tests of its behaviours script their
        own backend, tests/test_self_rag.py)."""
        return Generation(text="", logprobs=[math.log(0.5)] * len(reads))

    def generate(self, prompt, *, max_new_tokens, stop=(), want_stats=False, want_attention=False):
        self.generate_calls.append((prompt, list(stop)))
        self.max_new_tokens.append(max_new_tokens)
        out = self.respond(prompt, list(stop))
        return out if isinstance(out, Generation) else gen(out)

    def sample(self, prompt, settings):
        k, layer, stop, hook = settings.k, settings.layer, settings.stop, settings.hook
        self.sample_calls.append({"prompt": prompt, "k": k, "layer": layer, "stop": list(stop),
                                  "hook": hook, "forced_eos": settings.forced_eos})
        takes_stop = self.level.__code__.co_argcount - len(self.level.__defaults__ or ()) >= 2
        level = self.level(prompt, list(stop)) if takes_stop else self.level(prompt)
        rng = np.random.default_rng(zlib.crc32(prompt.encode()))
        d = self.hidden_size
        if level == "empty":
            return SampleSet([Generation("")] * k, np.zeros((k, d), np.float32), layer or 0, hook)
        if level == "low":
            vecs = np.repeat(rng.normal(size=(1, d)), k, axis=0)
        elif level == "high":
            vecs = rng.normal(scale=10.0, size=(k, d))
        else:
            vecs = np.repeat(rng.normal(size=(1, d)), k, axis=0) + rng.normal(scale=float(level), size=(k, d))
        samples = [gen("sample text") for _ in range(k)]
        return SampleSet(samples, vecs.astype(np.float32), layer or 0, hook)

    def sample_many(self, prompts, settings):
        return [self.sample(p, settings) for p in prompts]

    def score(self, prompt, continuation):
        self.score_calls.append((prompt, continuation))
        return Generation(text=continuation, tokens=[continuation], logprobs=[self.score_fn(prompt, continuation)])

    def count_tokens(self, text):
        return len(text.split())

    def encode(self, text):
        return fake_ids(fake_tokens(text))

    def encode_plain(self, text):
        if text in SKIPPED_IN_TEXT:      # Self-RAG's special tokens: one token each
            return fake_ids([text])
        return self.encode(text)

    def decode(self, token_ids, skip_special_tokens=False):
        """As a sentencepiece decoder: the pieces joined, the leading space dropped."""
        text = "".join(_PIECES[t] for t in token_ids)
        return text[1:] if text.startswith(" ") else text

    def piece_words(self, token_ids):
        return self.words(token_ids)

    def words(self, token_ids):
        """Every fake token is one word."""
        return [(i, i, _PIECES[t].strip()) for i, t in enumerate(token_ids)]

    def attention_rows(self, token_ids, positions):
        tokens = [_PIECES[t] for t in token_ids]
        self.attention_calls.append((tokens, list(positions)))
        if self.attend is not None:
            return [list(self.attend(tokens, p)) for p in positions]
        return [[1.0 / (p + 1) if j <= p else 0.0 for j in range(len(tokens))] for p in positions]


@dataclass
class Hit:
    id: str
    score: float
    title: str
    text: str


class FakeSearcher:
    """Returns `results(query)` (a list of Hit) or, by default, all docs in order; logs queries."""

    def __init__(self, docs: list[Hit], results=None):
        self.docs, self.results, self.queries = docs, results, []

    def search(self, query, k=3):
        self.queries.append(query)
        hits = self.results(query) if self.results else self.docs
        return list(hits)[:k]


def hit(i: str, text: str) -> Hit:
    return Hit(id=i, score=1.0, title=f"T{i}", text=text)
