"""The interface every method implements, and what the methods share: a method is built once per
(backend, searcher, data set, settings) and answers one question per `run(record)`; `trace` records
every step so case studies (the paper's Table 5) can be read from saved results."""
from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping

from ..core.errors import UserError
from ..prompts import dataset_family, demos_for

# DRAGIN's published configs for LLaMA-2-7b-chat (its config/Llama2-7b-chat/<set>/*.json: fewshot,
# generate_max_length, DRAGIN's hallucination_threshold and retrieve_keep_top_k, FLARE's threshold),
# used by both baselines modes. The simple-QA sets are not in those configs; they take HotpotQA's
# row (the closest in answer style) -- stated in `config`.
BASELINE_TABLE = {
    "2wiki": {"n_shot": 6, "max_new_tokens": 64, "dragin_threshold": 1.0, "dragin_keep_top_k": 25,
              "flare_threshold": 0.1},
    "hotpotqa": {"n_shot": 8, "max_new_tokens": 100, "dragin_threshold": 0.8, "dragin_keep_top_k": 35,
                 "flare_threshold": 0.08},
    "iirc": {"n_shot": 8, "max_new_tokens": 128, "dragin_threshold": 0.6, "dragin_keep_top_k": 35,
             "flare_threshold": 0.08},
}
BASELINE_TABLE["simple"] = dict(BASELINE_TABLE["hotpotqa"])


@dataclass
class MethodResult:
    answer: str
    raw_output: str
    trace: list[dict] = field(default_factory=list)
    n_retrievals: int = 0
    extra: dict = field(default_factory=dict)


# What the baselines (CoT, IRCoT, FLARE, DRAGIN) read from a profile. `demos: official` gives the
# faithful baselines DRAGIN's own lists (from `dragin_repo`) and the fixed ones SeaKR's (from
# `official_repo`, as SeaKR gets them).
BASELINE_CONFIG = {"answer_extraction": "evaluation.answer_extraction", "top_k_docs": "retrieval.top_n",
                   "mode": "baselines.mode", "n_shot": "baselines.n_shot", "max_new_tokens": "baselines.max_new_tokens",
                   "max_steps": "baselines.max_steps", "demos": "prompts.demos",
                   "official_repo": "prompts.official_repo", "dragin_repo": "prompts.dragin_repo",
                   "dtype": "baselines.dtype", "decoding": "baselines.decoding"}
# ... and their defaults (the settings CoT and the step loops share)
BASELINE_DEFAULTS = {"mode": "fixed", "answer_extraction": "fixed", "demos": "paper", "official_repo": "data/raw/SeaKR",
                     "dragin_repo": "data/raw/DRAGIN", "dtype": None, "decoding": None}


# The state of the question being answered (`Method.q`): one object per `run`, in the running
# context, so one method object answers several questions at once (runner.concurrency) unchanged.
_QUESTION: contextvars.ContextVar[SimpleNamespace] = contextvars.ContextVar("seakr_question")


class Method:
    """Settings: DEFAULTS updated by the caller's. Subclasses implement `answer(record)` and keep what
    belongs to one question on `self.q` (fresh per `run`; `q.n_search` counts searches), never on `self`."""

    name = "method"
    DEFAULTS: dict[str, Any] = {}
    # setting -> the config key it is read from; settings not in DEFAULTS are ignored (shared tables)
    CONFIG: dict[str, str] = {}
    # None: questions may run side by side (runner.concurrency > 1); else why they may not
    one_question_at_a_time: str | None = None

    @classmethod
    def settings_from(cls, cfg) -> dict[str, Any]:
        """The profile's values of the settings in CONFIG; a null keeps the method's own default."""
        out = {}
        for setting, key in cls.CONFIG.items():
            value = cfg.get(key) if setting in cls.DEFAULTS else None
            if value is not None:
                out[setting] = value
        return out

    def __init__(self, backend, searcher, dataset_name: str, settings: Mapping[str, Any] | None = None):
        self.backend, self.searcher, self.dataset_name = backend, searcher, dataset_name
        self.family = dataset_family(dataset_name)
        settings = dict(settings or {})
        unknown = sorted(set(settings) - set(self.defaults()))
        if unknown:
            raise UserError(f"unknown setting(s) {', '.join(unknown)} for method '{self.name}'",
                            setting=unknown[0],
                            fix=f"use only {', '.join(sorted(self.defaults()))}")
        self.settings = {**self.defaults(), **settings}
        self._search_lock = threading.Lock()

    def defaults(self) -> dict[str, Any]:
        return dict(self.DEFAULTS)

    @property
    def config(self) -> dict[str, Any]:
        """What determines the output: hashed by the runner to key the results file."""
        config = {"method": self.name, "dataset": self.dataset_name, "model": getattr(self.backend, "name", "?"),
                  **self.settings}
        # another backend samples differently: its runs must not resume the transformers ones (keyed without it)
        kind = getattr(self.backend, "kind", None)
        if kind:
            config["backend"] = kind
        return config

    @classmethod
    def model_dtype(cls, settings: Mapping[str, Any]) -> str | None:
        """The dtype this method's model must be loaded in; None = the profile's model.dtype."""
        return None

    @property
    def demos(self):
        return demos_for(self.dataset_name, self.settings.get("n_shot"),
                         self.settings.get("demos", "paper"), self.settings.get("official_repo"))

    def run(self, record) -> MethodResult:
        token = _QUESTION.set(SimpleNamespace(n_search=0))
        try:
            return self.answer(record)
        finally:
            _QUESTION.reset(token)

    @property
    def q(self) -> SimpleNamespace:
        return _QUESTION.get()

    def answer(self, record) -> MethodResult:  # pragma: no cover - interface
        raise NotImplementedError

    # -- shared helpers -------------------------------------------------------------------------
    def search(self, query: str, k: int) -> list:
        with self._search_lock:     # questions side by side share one searcher (Lucene via JNI)
            return list(self.searcher.search(query, k=k))


def step_record(kind: str, prompt: str, output: str, **more) -> dict:
    """One trace entry; `prompt_chars` rather than the prompt keeps result files small."""
    return {"kind": kind, "prompt_chars": len(prompt), "output": output, **more}


def hits_brief(hits) -> list[dict]:
    return [{"id": h.id, "title": getattr(h, "title", ""), "score": getattr(h, "score", None)}
            for h in hits]
