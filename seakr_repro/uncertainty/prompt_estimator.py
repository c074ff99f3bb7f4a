"""The prompt-based estimator of the ablation: ask the model whether it has sufficient knowledge.

The paper only says it asks "do I have sufficient knowledge to solve the question?"; the prompt
below is ours. The uncertainty is 1 - p(Yes):
- the answer starts with "Yes": 1 - p(Yes), p = the probability of the tokens spelling "Yes";
- the answer starts with "No": p(No), taking p(Yes) ~ 1 - p(No) (greedy decoding reports only the
  chosen token's probability);
- otherwise the first yes/no word anywhere in the text, as a hard 0 / 1;
- no yes/no at all: 1.0 (the model did not claim the knowledge, so retrieve).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .logit_estimators import _direction

PROMPT = (
    "{context}Question: {question}\n"
    "Do you have sufficient knowledge to answer this question correctly without looking anything "
    "up? Answer with Yes or No.\n"
    "Answer:"
)

_LEAD = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
_ANY = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


@dataclass(frozen=True)
class PromptJudgement:
    uncertainty: float      # in [0, 1]; higher = more uncertain
    answer: str | None      # "yes" | "no" | None (unparseable)
    p_answer: float | None  # probability of the answer's tokens, from their log-probs
    text: str


def build_prompt(question: str, context: str = "") -> str:
    """The sufficiency question; `context` (documents, previous steps) is prepended verbatim."""
    if context and not context.endswith("\n"):
        context += "\n"
    return PROMPT.format(context=context, question=question.strip())


def answer_probability(tokens, logprobs, word: str) -> float | None:
    """Probability of the leading tokens that spell `word` (leading whitespace/punctuation tokens
    skipped); None when the tokens do not line up with the word."""
    spelled, total, started = "", 0.0, False
    for tok, lp in zip(tokens, logprobs):
        piece = tok.lower()
        if not started:
            piece = re.sub(r"^\W+", "", piece)
            if not piece:
                continue            # "\n", " ", "*" before the answer
            started = True
        spelled += piece
        total += lp
        if len(spelled) >= len(word):
            return math.exp(total) if spelled.startswith(word) else None
        if not word.startswith(spelled):
            return None
    return None


def judge(text: str, tokens=(), logprobs=()) -> PromptJudgement:
    """The reply's uncertainty (module doc)."""
    lead = _LEAD.match(text)
    if lead:
        word = lead.group(1).lower()
        p = answer_probability(tokens, logprobs, word)
        if p is not None:
            return PromptJudgement(1.0 - p if word == "yes" else p, word, p, text)
        return PromptJudgement(0.0 if word == "yes" else 1.0, word, None, text)
    found = _ANY.search(text)
    if found:
        word = found.group(1).lower()
        return PromptJudgement(0.0 if word == "yes" else 1.0, word, None, text)
    return PromptJudgement(1.0, None, None, text)


@_direction(True)
def prompt_uncertainty(backend, question: str, context: str = "", max_new_tokens: int = 4) -> PromptJudgement:
    """Ask `backend` the sufficiency question, greedily: no stop strings, as a reply may open with
    "\n"; a few tokens are enough for Yes/No."""
    gen = backend.generate(build_prompt(question, context), max_new_tokens=max_new_tokens, stop=(), want_stats=False)
    return judge(gen.text, gen.tokens, gen.logprobs)
