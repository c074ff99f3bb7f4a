"""Pull the short answer out of a chain-of-thought ("... So the answer is X."), in two modes
(setting `evaluation.answer_extraction`):
faithful -- the official SeaKR reasoner, bugs included: lower-cased; the FIRST "the answer is"
  (optionally ":") up to the first comma or period after it ("August 25, 1963" -> "august 25");
  else "X is the answer" back to the previous ".", "?" or "!"; else None (the caller re-asks).
fixed -- what the official code means to do: case kept; the LAST "the answer is" with a non-empty
  answer wins (a model's final claim), to the end of its sentence (a newline, or ".", "!" or "?"
  before whitespace or the end, not a period closing an abbreviation: "L.", "M.D.", "No.");
  quotes and a trailing period stripped; "X is the answer" as fallback, also at the start.
  Known limit: an answer ending in a one-letter word ("Vitamin C. It ...") runs on to the next
  sentence end, because "C." looks like an initial."""
from __future__ import annotations

import re

from ..core.errors import UserError

MODES = ("fixed", "faithful")

_FAITHFUL_MAIN = re.compile(r"the answer is(?:\s*:\s*)?(.*?)[,.]", re.DOTALL)
_FAITHFUL_ALT = re.compile(r"[.?!]\s*([^?!]*?)\s+is the answer\b", re.DOTALL)
_FIXED_CUE = re.compile(r"the answer is(?:\s*:)?", re.IGNORECASE)
_FIXED_ALT = re.compile(r"(?:^|[.?!]\s|\n)\s*([^.?!\n]*?)\s+is the answer\b", re.IGNORECASE)
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "no", "nos", "co", "corp", "inc", "ltd",
                  "vs", "etc", "mt", "ft", "gen", "col", "lt", "sgt", "capt", "prof", "rev", "vol",
                  "jan", "feb", "mar", "apr", "aug", "sep", "sept", "oct", "nov", "dec"}
_INITIALISM = re.compile(r"^(?:[A-Za-z]\.)+$")  # "L." "M.D." "U.S."
_QUOTES = "\"'`“”‘’«»"


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise UserError(f"unknown answer extraction mode '{mode}'", setting="evaluation.answer_extraction",
                        fix="use 'fixed' or 'faithful'")


def _is_abbreviation(text: str, dot: int) -> bool:
    """Does the '.' at index `dot` close an abbreviation (rather than a sentence)?"""
    start = dot
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:dot + 1].lstrip("(" + _QUOTES)
    return bool(_INITIALISM.match(word)) or word[:-1].lower() in _ABBREVIATIONS


def _sentence_end(text: str, start: int) -> int:
    """Index where the sentence that contains `start` ends (exclusive), see the module doc."""
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "\n":
            return i
        if ch in ".!?" and (i + 1 == len(text) or text[i + 1].isspace()):
            if ch == "." and _is_abbreviation(text, i):
                continue
            return i
    return len(text)


def _clean(answer: str) -> str:
    answer = answer.strip().strip(_QUOTES).strip()
    if answer.endswith(".") and not _is_abbreviation(answer, len(answer) - 1):
        answer = answer[:-1].rstrip().strip(_QUOTES).strip()
    return answer


def _faithful(text: str) -> str | None:
    low = text.lower()
    m = _FAITHFUL_MAIN.search(low) or _FAITHFUL_ALT.search(low)
    return m.group(1).strip() if m else None


def _fixed(text: str) -> str | None:
    for cue in reversed(list(_FIXED_CUE.finditer(text))):
        answer = _clean(text[cue.end():_sentence_end(text, cue.end())])
        if answer:
            return answer
    alts = list(_FIXED_ALT.finditer(text))
    return (_clean(alts[-1].group(1)) or None) if alts else None


def extract_answer(text: str | None, mode: str = "fixed") -> str | None:
    """The short answer stated in `text`, or None when it states none (module doc: the two modes)."""
    _check_mode(mode)
    if not text:
        return None
    return _faithful(text) if mode == "faithful" else _fixed(text)


def answer_from_forced(continuation: str | None, mode: str = "fixed") -> str:
    """The answer of a call forced with " So the answer is ": faithful, the continuation verbatim
    (the code's stops at "\n" or ". "); fixed, cut at its sentence end and cleaned."""
    _check_mode(mode)
    text = continuation or ""
    if mode == "faithful":
        return text
    return _clean(text[:_sentence_end(text, 0)])


# ---------------------------------------------------------------------------------------------
# DRAGIN's answer extraction (its evaluation script), for `baselines.mode: faithful`, in two stages:
#   1. `dragin_trim`: cut the prediction before "Question:", "#10000000" or "Note:" (each, in
#      turn, where it occurs after the first character). If it then contains "the answer is"
#      (case-sensitive) it is kept; otherwise the model is asked again with " So the answer is "
#      appended for 20 new tokens (`DRAGIN_REASK_TOKENS`), and `dragin_reasked` joins the two and
#      cuts before those markers again (now also at the first character).
#   2. `dragin_answer`: the text after the FIRST "the answer is" (one character skipped after it)
#      to the end of the prediction, a trailing "</s>", "<|endoftext|>" and "." removed (IIRC: also
#      a trailing newline, in that order). No "the answer is": 2Wiki scores the whole prediction,
#      the others score "".
DRAGIN_CUE = "the answer is"
DRAGIN_REASK = " So the answer is "
DRAGIN_REASK_TOKENS = 20
DRAGIN_SPLITS = ("Question:", "#10000000", "Note:")
_DRAGIN_TAILS = {"iirc": ("</s>", "<|endoftext|>", "\n", ".")}


def dragin_trim(prediction: str, *, first_char: bool = False) -> str:
    """The prediction cut before each split marker in turn (at index 0 too when `first_char`)."""
    for word in DRAGIN_SPLITS:
        at = prediction.find(word)
        if at > 0 or (first_char and at == 0):
            prediction = prediction[:at]
    return prediction


def dragin_needs_reask(trimmed: str) -> bool:
    return DRAGIN_CUE not in trimmed


def dragin_reasked(trimmed: str, continuation: str) -> str:
    """The prediction after the re-ask: trimmed text + the cue + the stripped continuation."""
    return dragin_trim(trimmed + DRAGIN_REASK + continuation.strip(), first_char=True)


def dragin_answer(prediction: str, family: str) -> str:
    """DRAGIN's answer of a (trimmed or re-asked) prediction for a data-set family
    ('2wiki' | 'hotpotqa' | 'iirc'; other families follow HotpotQA)."""
    at = prediction.find(DRAGIN_CUE)
    if at < 0:
        return prediction if family == "2wiki" else ""
    answer = prediction[at + len(DRAGIN_CUE) + 1:]
    for tail in _DRAGIN_TAILS.get(family, ("</s>", "<|endoftext|>", ".")):
        if answer.endswith(tail):
            answer = answer[:-len(tail)]
    return answer
