"""SKR, step 1 (paper section 3.1): collect the model's self-knowledge on TRAINING questions.

Each training question is answered twice with the same few-shot CoT prompt, once closed-book and
once with the top-3 BM25 passages of the question as context, and both answers are scored against
the gold answers with a metric E (exact match by default, as the official code). Eq. 4:

    known   (D+, no retrieval needed)  if E(closed) >= E(retrieval)
    unknown (D-, retrieval helps)      otherwise
    discarded                          if both answers are incorrect (E = 0 for both)

Ties (`ties`) and the answer scored (`label_answer`) follow the paper or the official code
(THUNLP-MT/SKR source/skr.py), one row each in docs/faithful-and-fixed.md.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ...core.errors import UserError
from ...evaluation import answer_from_forced, exact_match, extract_answer, f1_score
from ..text import nlp
from ...core.io import iter_jsonl, write_jsonl
from ...prompts import build_prompt, demos_for, stop_strings
from ..base import step_record

KNOWN, UNKNOWN, DISCARDED = "known", "unknown", "discarded"
# How SKR answers, shared by labels and methods (labels describe the model answering with these);
# the paper: 4 CoT demonstrations, top-3 passages. `mode`: the answer extraction.
ANSWER_DEFAULTS: dict[str, Any] = {"n_shot": 4, "top_k_docs": 3, "max_new_tokens": 100, "mode": "fixed"}
# ... and the profile keys they are read from (`answer_settings_from`, `SKRMethod.CONFIG`)
ANSWER_CONFIG = {"mode": "evaluation.answer_extraction"}
METRICS = {"em": exact_match, "f1": f1_score}
TIES = ("known", "discard")
LABEL_ANSWERS = ("package", "official")


def official_answer(prediction: str, gold: str) -> str:
    """The answer skr.py scores (`get_answer_ref`) of a raw output and the FIRST gold: newlines deleted
    (not spaced); the text after the first "answer is"; else the gold when a spaCy sentence contains
    it (case-blind); else the first sentence; "" for an empty output (which skr.py cannot score)."""
    text = prediction.replace("\n", "").strip()
    if "answer is" in text:
        return text[text.index("answer is") + len("answer is"):]
    sents = [str(s).strip() for s in nlp()(text).sents]
    if any(gold.lower() in s.lower() for s in sents):
        return gold
    return sents[0] if sents else ""


def official_em(prediction: str, golds: Sequence[str]) -> float:
    """skr.py's score of one output: exact match, over every gold, of `official_answer`."""
    return exact_match(official_answer(prediction, golds[0].strip()), golds)


@dataclass
class LabelledQuestion:
    id: str
    question: str
    label: str                     # known | unknown | discarded
    answer_closed: str = ""
    answer_retrieval: str = ""
    score_closed: float = 0.0
    score_retrieval: float = 0.0
    retrieved: list[str] = field(default_factory=list)   # ids of the passages given as context

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "LabelledQuestion":
        if data.get("label") not in (KNOWN, UNKNOWN, DISCARDED):
            raise UserError(f"SKR label {data.get('label')!r} of question {data.get('id')!r} is not "
                            f"one of {KNOWN}, {UNKNOWN}, {DISCARDED}",
                            fix="rebuild the labels with build_skr_labels")
        return cls(id=str(data["id"]), question=data["question"], label=data["label"],
                   answer_closed=data.get("answer_closed", ""), answer_retrieval=data.get("answer_retrieval", ""),
                   score_closed=float(data.get("score_closed", 0.0)),
                   score_retrieval=float(data.get("score_retrieval", 0.0)), retrieved=list(data.get("retrieved", [])))


def label_from_scores(score_closed: float, score_retrieval: float, ties: str = "known") -> str:
    """Eq. 4 of the paper, with both-incorrect questions discarded (see the module doc)."""
    if ties not in TIES:
        raise UserError(f"unknown SKR tie rule {ties!r}", setting="skr.ties", fix=f"use one of {TIES}")
    if score_closed <= 0 and score_retrieval <= 0:
        return DISCARDED
    if score_closed == score_retrieval and ties == "discard":
        return DISCARDED
    return KNOWN if score_closed >= score_retrieval else UNKNOWN


def check_label_answer(label_answer: str) -> None:
    if label_answer not in LABEL_ANSWERS:
        raise UserError(f"unknown SKR label answer {label_answer!r}", setting="skr.label_answer",
                        fix=f"use one of {', '.join(LABEL_ANSWERS)}")


def answer_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(ANSWER_DEFAULTS))
    if unknown:
        raise UserError(f"unknown SKR answer setting(s) {', '.join(unknown)}", setting=unknown[0],
                        fix=f"use only {', '.join(sorted(ANSWER_DEFAULTS))}")
    return {**ANSWER_DEFAULTS, **settings}


def answer_settings_from(cfg) -> dict[str, Any]:
    """The profile's values of SKR's answer settings (`ANSWER_CONFIG`), for building the labels."""
    return {s: cfg.get(key) for s, key in ANSWER_CONFIG.items() if cfg.get(key) is not None}


def skr_answer(backend, demos, question: str, docs: Sequence[str], *, max_new_tokens: int,
               mode: str = "fixed") -> tuple[str, str, list[dict]]:
    """(answer, raw text, trace) of one few-shot CoT answer, `docs` as context (Manual-CoT(-IR)):
    CoT's one final-mode call, re-asked with " So the answer is " when no answer is stated."""
    prompt = build_prompt(demos, question, docs=list(docs))
    stops = stop_strings(False, final=True)
    gen = backend.generate(prompt, max_new_tokens=max_new_tokens, stop=stops)
    kind = "answer_with_retrieval" if docs else "answer_closed_book"
    trace = [step_record(kind, prompt, gen.text)]
    answer, raw = extract_answer(gen.text, mode), gen.text
    if not answer:
        base = prompt if mode == "faithful" else prompt + gen.text
        forced = backend.generate(base + " So the answer is ", max_new_tokens=max_new_tokens,
                                  stop=[*stops, "\n"])
        answer = answer_from_forced(forced.text, mode)
        trace.append(step_record("forced_answer", base, forced.text))
        raw += f" So the answer is {forced.text}"
    return answer or "", raw, trace


def label_question(backend, searcher, record, demos, *, top_k_docs: int, max_new_tokens: int,
                   mode: str = "fixed", metric: str = "em", ties: str = "known",
                   label_answer: str = "package") -> LabelledQuestion:
    """Answer `record` closed-book and with retrieval, score both, label by Eq. 4."""
    closed, _, trace_closed = skr_answer(backend, demos, record.question, (),
                                         max_new_tokens=max_new_tokens, mode=mode)
    hits = list(searcher.search(record.question, k=top_k_docs))
    augmented, _, trace_retr = skr_answer(backend, demos, record.question, [h.text for h in hits],
                                          max_new_tokens=max_new_tokens, mode=mode)
    if label_answer == "official":
        # skr.py scores the CoT output as the model wrote it: the first call's text, without the
        # package's re-ask (SKR's results files hold no re-ask)
        s_closed = official_em(trace_closed[0]["output"], record.golds)
        s_retr = official_em(trace_retr[0]["output"], record.golds)
    else:
        score = METRICS[metric]
        s_closed, s_retr = score(closed, record.golds), score(augmented, record.golds)
    return LabelledQuestion(id=record.id, question=record.question, label=label_from_scores(s_closed, s_retr, ties),
                            answer_closed=closed, answer_retrieval=augmented, score_closed=s_closed,
                            score_retrieval=s_retr, retrieved=[h.id for h in hits])


def build_skr_labels(backend, searcher, train_records: Iterable, dataset_name: str, *,
                     metric: str = "em", ties: str = "known", label_answer: str = "package",
                     **answer: Any) -> list[LabelledQuestion]:
    """Labels of every one of `train_records`, discarded included; `answer` overrides ANSWER_DEFAULTS
    and must match the SKR method's. `label_answer="official"`: `official_em`, `metric` unused."""
    if metric not in METRICS:
        raise UserError(f"unknown SKR label metric {metric!r}", setting="skr.metric",
                        fix=f"use one of {', '.join(METRICS)}")
    check_label_answer(label_answer)
    s = answer_settings(answer)
    demos = demos_for(dataset_name, s["n_shot"])
    return [label_question(backend, searcher, r, demos, top_k_docs=s["top_k_docs"], max_new_tokens=s["max_new_tokens"],
                           mode=s["mode"], metric=metric, ties=ties, label_answer=label_answer)
            for r in train_records]


def usable(labels: Iterable[LabelledQuestion]) -> list[LabelledQuestion]:
    """The labelled questions SKR learns from: D+ and D- (discarded ones left out)."""
    return [lq for lq in labels if lq.label in (KNOWN, UNKNOWN)]


def labels_summary(labels: Sequence[LabelledQuestion]) -> dict[str, Any]:
    """Counts and a fingerprint of (id, label) pairs: enough to key results on the label set."""
    pairs = sorted((lq.id, lq.label) for lq in labels)
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:12]
    counts = {k: sum(lq.label == k for lq in labels) for k in (KNOWN, UNKNOWN, DISCARDED)}
    return {**counts, "sha": digest}


def save_labels(path: str | Path, labels: Iterable[LabelledQuestion]) -> int:
    return write_jsonl(path, (lq.to_dict() for lq in labels))


def load_labels(path: str | Path) -> list[LabelledQuestion]:
    return [LabelledQuestion.from_dict(obj)
            for _, obj in iter_jsonl(path, "SKR label file", "build it with build_skr_labels")]
