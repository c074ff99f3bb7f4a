"""A synthetic backend with a real model's shapes and instant, deterministic random outputs.

`make scale-check` and `cost`'s dry run drive the profile's own code (methods, runner, cache, step
02) with it, without a GPU or weights. Selected by `model.backend: synthetic` (the shapes of
`model.name`) or `model.name: synthetic-llama-2-7b`.

Every output is drawn from a generator seeded by a hash of (call kind, prompt, parameters): the
same call always gives the same answer. Texts are sentences of words from the prompt's end (so
queries retrieve something), or "So the answer is X." alone; sample vectors are, per
context, tight (U below the official delta = -6) or spread out, so both branches of every loop
run. How often each happens, and how long a generation runs, are its `DECISIONS`; `cost`'s dry
run sets them per model from a finished run's records (`DECISIONS_ENV`).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from typing import Sequence

import numpy as np

from .base import Generation, SampleSet
from .sampling_settings import Sampling
from .reflection_tokens import SKIPPED_IN_TEXT

WORDS = ("river city army king film album band court bridge island novel church school war prize "
         "station museum league party north south old new great first second early late red blue "
         "stone green black white").split()
# answer_rate: the share of generations that end with "So the answer is X."; retrieve_rate: the
# share of sample sets spread out (SeaKR's U above its threshold); words: a generation's mean words;
# newline_rate: the share that open with a newline, which a "\n" stop cuts to nothing (a loop's end)
DECISIONS = {"answer_rate": 0.35, "retrieve_rate": 0.5, "words": 16.0, "newline_rate": 0.0}
DECISIONS_ENV = "SEAKR_SYNTHETIC_DECISIONS"     # JSON {model: some of DECISIONS}, in cost's dry run
SEED_ENV = "SEAKR_SYNTHETIC_SEED"               # cost's dry run averages several draws
_TOKEN = re.compile(r"\s*\S+|\n")


def _rng(*parts) -> np.random.Generator:
    parts = (os.environ[SEED_ENV], *parts) if os.environ.get(SEED_ENV) else parts     # another draw of it all
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def stand_in_stats(prompt: str, text: str, n: int) -> tuple[list[float], list[float]]:
    """The synthetic statistics (entropies, logsumexps) of a continuation's n tokens, from a
    generator of their own, as a model computes them beside its tokens: asking for them changes
    nothing else (the call cache serves both kinds of call from one entry)."""
    rng = _rng("stats", prompt, text)
    return rng.exponential(1.0, n).tolist(), rng.normal(20.0, 2.0, n).tolist()


def synthetic_word(i: int) -> str:
    """The i-th word of the synthetic vocabulary: real words, then numbered ones."""
    return WORDS[i] if i < len(WORDS) else f"{WORDS[i % len(WORDS)]}{i // len(WORDS)}"


class SyntheticBackend:
    """The Backend protocol with `n_layers` x `hidden_size` shapes and random outputs."""

    fingerprint = "synthetic-v1"

    def __init__(self, name: str = "synthetic-llama-2-7b", n_layers: int = 32, hidden_size: int = 4096,
                 vocab: int = 5000):
        self.name, self.n_layers, self.hidden_size = name, int(n_layers), int(hidden_size)
        self.eos_token_id, self.vocab = 2, int(vocab)
        given = json.loads(os.environ.get(DECISIONS_ENV) or "{}")      # KBAE's adapter: its base's
        self.decisions = {**DECISIONS, **given.get(name.split("+")[0], {})}
        self._pieces: dict[int, str] = {}       # token id -> its text, for `words`

    max_context = 4096           # LLaMA-2's context

    # ------------------------------------------------------------------------------ text
    def count_tokens(self, text: str) -> int:
        return len(_TOKEN.findall(text))

    def _token_id(self, piece: str) -> int:
        tid = 3 + int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=4).digest(), "little") % 31997
        if len(self._pieces) > 1_000_000:      # bounded: a long run must not grow without limit
            self._pieces.clear()
        self._pieces[tid] = piece
        return tid

    def encode(self, text: str) -> list[int]:
        return [1] + [self._token_id(t) for t in _TOKEN.findall(text)]     # BOS = 1, as LLaMA

    def words(self, token_ids: Sequence[int]) -> list[tuple[int, int, str]]:
        """One word per token (each synthetic token is a whitespace-led word)."""
        return [(i, i, self._pieces.get(int(t), "").strip()) for i, t in enumerate(token_ids)]

    piece_words = words          # the faithful baselines' word merge: the same words here

    # the faithful baselines' view of a continuation (no generation_config.json: greedy)
    generation_config: dict = {}

    def encode_plain(self, text: str) -> list[int]:
        if text in SKIPPED_IN_TEXT:     # Self-RAG's special tokens: one token each, as in its vocabulary
            return [self._token_id(text)]
        return self.encode(text)[1:]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The tokens' text joined, the leading space dropped (as a sentencepiece decoder)."""
        text = "".join(self._pieces.get(int(t), "") for t in token_ids)
        return text[1:] if text.startswith(" ") else text

    def attention_rows(self, token_ids: Sequence[int], positions: Sequence[int]) -> list[list[float]]:
        """Causal rows of random attention that sum to one, seeded by the sequence."""
        ids, n = list(map(int, token_ids)), len(token_ids)
        rng = _rng("attention", ids)
        rows = []
        for p in positions:
            row = np.zeros(n)
            row[: p + 1] = rng.random(p + 1)
            rows.append((row / row.sum()).tolist())
        return rows

    def close(self) -> None:
        self._pieces.clear()

    def _text(self, rng: np.random.Generator, max_new_tokens: int, prompt: str) -> str:
        # words of the prompt's end (the question, the last passage), as a small model echoes them:
        # a query built from the text then finds passages, as a real model's does
        pool = re.findall(r"[A-Za-z]{3,}", prompt[-600:]) or [synthetic_word(i) for i in range(200)]
        words = lambda n: [pool[int(i)] for i in rng.integers(0, len(pool), n)]   # noqa: E731
        # an answering generation opens with its answer, as a small instruct model's does ("The answer
        # is X."): a step's ". " stop keeps it; the others run to `words` on average over all
        if rng.random() < (answer_rate := self.decisions["answer_rate"]):
            text = f"So the answer is {words(1)[0].title()}."
        else:
            per = max(1.0, (self.decisions["words"] - 5 * answer_rate) / max(1e-9, 1 - answer_rate)) / 1.5
            low, sentences = max(1, round(per * 0.6)), []
            for _ in range(int(rng.integers(1, 3))):         # one or two sentences: 1.5 on average
                sentence = " ".join(words(int(rng.integers(low, max(low + 1, round(per * 1.4) + 1)))))
                sentences.append(sentence[:1].upper() + sentence[1:] + ".")
            text = " ".join(sentences)
        text = text[: 8 * max_new_tokens]
        # a generator of its own: the other draws stay as they were at any newline_rate
        return "\n" + text if _rng("newline", text).random() < self.decisions["newline_rate"] else text

    def _generation(self, rng, prompt: str, text: str, stop: Sequence[str], max_new_tokens: int,
                    want_stats: bool, want_attention: bool) -> Generation:
        reason = "eos"
        cuts = [text.find(s) for s in stop if s and s in text]
        if cuts:
            text, reason = text[:min(cuts)], "stop"
        tokens = _TOKEN.findall(text)
        if len(tokens) > max_new_tokens:
            tokens, reason = tokens[:max_new_tokens], "length"
            text = "".join(tokens)
        n = len(tokens)
        logprobs = (-rng.exponential(0.6, n)).tolist()
        attention = rng.random(n).tolist() if want_attention else None
        entropies, logsumexp = stand_in_stats(prompt, text, n) if want_stats else (None, None)
        return Generation(
            text=text, token_ids=[self._token_id(t) for t in tokens],
            tokens=tokens, logprobs=logprobs, entropies=entropies, logsumexp=logsumexp,
            finish_reason=reason, attention=attention,
            all_token_ids=[self._token_id(t) for t in tokens],
            n_prompt_tokens=self.count_tokens(prompt))

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        rng = _rng("generate", prompt, max_new_tokens)
        return self._generation(rng, prompt, self._text(rng, max_new_tokens, prompt), stop, max_new_tokens,
                                want_stats, want_attention)

    def score(self, prompt: str, continuation: str) -> Generation:
        rng = _rng("score", prompt, continuation)
        tokens = _TOKEN.findall(continuation)
        gen = self._generation(rng, prompt, continuation, (), max(len(tokens), 1), True, False)
        return gen

    def read_logprobs(self, prompt: str, continuation_ids: Sequence[int],
                      reads: Sequence[tuple[int, int]]) -> Generation:
        rng = _rng("read", prompt, tuple(continuation_ids), tuple(map(tuple, reads)))
        return Generation(text="", logprobs=(-rng.exponential(2.0, len(reads))).tolist(),
                          n_prompt_tokens=self.count_tokens(prompt))

    # ------------------------------------------------------------------------------ samples
    def _vectors(self, rng: np.random.Generator, k: int, tight: bool) -> np.ndarray:
        base = rng.standard_normal(self.hidden_size, dtype=np.float32)
        noise = rng.standard_normal((k, self.hidden_size), dtype=np.float32)
        if tight:      # near-identical small vectors: U ~ -6.4, below the official delta
            return base * np.float32(0.01) + noise * np.float32(1e-4)
        return base + noise * np.float32(0.5)

    def sample(self, prompt: str, settings: Sampling) -> SampleSet:
        s = settings.at_layer(self.n_layers)
        k, max_new_tokens = s.k, s.max_new_tokens
        rng = _rng("sample", prompt, k, max_new_tokens, s.temperature, s.top_k, s.top_p, s.seed, s.layer,
                   s.hook, s.forced_eos)
        tight = bool(rng.random() < 1 - self.decisions["retrieve_rate"])
        texts = [self._text(rng, max_new_tokens, prompt) for _ in range(1 if tight else k)]
        samples = [self._generation(rng, prompt, texts[0 if tight else i], s.stop, max_new_tokens,
                                    s.want_stats, False) for i in range(k)]
        for g in samples:            # no sampler here: the warped log-probs are the raw ones
            if tight:                # a confident model is confident by every estimator: they agree
                g.logprobs = [x * 0.1 for x in g.logprobs]
                g.entropies = None if g.entropies is None else [x * 0.1 for x in g.entropies]
            g.warped_logprobs = list(g.logprobs)
        return SampleSet(samples=samples, vectors=self._vectors(rng, k, tight), layer=s.layer, hook=s.hook)

    def sample_many(self, prompts: Sequence[str], settings: Sampling) -> list[SampleSet]:
        return [self.sample(p, settings) for p in prompts]

    def eos_vectors_all_layers(self, prompt: str, completions: Sequence[Sequence[int]]) -> dict:
        """{hook: L x k x d float32}, as step 02 reads them from a real model."""
        rng = _rng("eos", prompt, [list(c) for c in completions])
        k = len(completions)
        tight = bool(rng.random() < 0.5)
        return {h: np.stack([self._vectors(rng, k, tight) for _ in range(self.n_layers)])
                for h in ("mlp_out", "residual")}


@lru_cache(maxsize=1)
def _vocab(n: int = 5000) -> list[str]:
    return [synthetic_word(i) for i in range(n)]


def synthetic_passages(n: int, words: int = 100, seed: int = 0):
    """Passages 0..n-1 of the synthetic corpus (titles + `words` Zipf-distributed words),
    deterministic in (n, seed); drawn in blocks for speed."""
    from ..data.corpus import make_passage

    vocab, block = _vocab(), 10_000
    for start in range(0, n, block):
        ids = _rng("passages", seed, start).zipf(1.3, (min(block, n - start), words + 2)) % len(vocab)
        for j, row in enumerate(ids.tolist()):
            i = start + j
            title = f"{vocab[row[0]].title()} {vocab[row[1]].title()} {i // 7}"
            yield make_passage(str(i), title, " ".join([vocab[w] for w in row[2:]]))


def synthetic_question(dataset: str, i: int) -> dict:
    """A question in the real record format (what step 00 writes), for absent dev sets."""
    rng = _rng("question", dataset, i)
    topic = " ".join(synthetic_word(int(j)) for j in rng.zipf(1.3, 6) % 5000)
    answer = synthetic_word(int(rng.integers(0, 200))).title()
    return {"id": f"synthetic-{dataset}-{i}", "question": f"Which {topic} is older?",
            "answers": [answer], "aliases": [], "type": "synthetic", "supporting": [],
            "source": dataset, "extra": {}}

