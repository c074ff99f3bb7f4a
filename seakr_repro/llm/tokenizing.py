"""Prompt text <-> token ids, the same way in every backend. Generated tokens are decoded IN
CONTEXT (after the prompt's last tokens), as vLLM's detokeniser does: decoded alone, a
sentencepiece token (LLaMA) loses its leading space ("▁Ivania" after "1959.").
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..core.errors import UserError
from .base import Generation

CONTEXT_TOKENS = 6       # prompt tokens decoded before a continuation (vLLM keeps 5)
INCOMPLETE = "\ufffd"    # what a byte-fallback piece decodes to until its character is complete


def decode_pieces(decode: Callable[[Sequence[int]], str], ids: Sequence[int],
                  context: Sequence[int] = ()) -> list[str]:
    """The text each token of `ids` adds after `context` (usually the prompt's ids): joined, the
    continuation as vLLM returns it. Each token costs two decodes of a few tokens. Byte-fallback
    tokens of one character add "" until the last, which adds the whole character (as vLLM holds
    back text ending in an incomplete UTF-8 sequence)."""
    window = list(context)[-CONTEXT_TOKENS:] + list(ids)
    start = len(window) - len(ids)
    prefix, read, before = 0, start, None      # window[prefix:read]: text already handed out
    pieces = []
    for i in range(start, len(window)):
        if before is None:
            before = decode(window[prefix:read])
        text = decode(window[prefix:i + 1])
        if len(text) <= len(before) or text.endswith(INCOMPLETE):
            pieces.append("")                 # nothing complete yet: wait for the next token
            continue
        pieces.append(text[len(before):])
        prefix, read, before = read, i + 1, None
    return pieces


class ContextOverflowError(UserError):
    """A prompt plus the tokens to generate does not fit in the model's context, even after the
    methods dropped what they may drop (prompts.fit_prompt); never truncated silently."""


def check_fits(n_prompt: int, n_new: int, max_context: int | None, model: str,
               setting: str = "model.name") -> None:
    """Raise ContextOverflowError when n_prompt + n_new tokens exceed `max_context` (None: unknown)."""
    if max_context is not None and n_prompt + n_new > max_context:
        raise ContextOverflowError(
            f"a prompt of {n_prompt} tokens plus {n_new} tokens to generate exceeds the "
            f"{max_context}-token context of {model}, even with the oldest passages and few-shot "
            f"demonstrations dropped", setting=setting,
            fix="use a model with a longer context, or fewer/shorter steps and passages "
                "(seakr.max_docs, seakr.max_reasoning_steps, seakr.max_new_tokens)")


def check_reads(reads, n_continuation: int) -> int:
    """The continuation tokens a `read_logprobs` call must run (the furthest read position);
    a position outside 0 .. n_continuation is a caller's bug."""
    n = max((int(j) for j, _ in reads), default=0)
    if any(int(j) < 0 for j, _ in reads) or n > n_continuation:
        raise ValueError(f"read positions must lie in 0..{n_continuation}, got {list(reads)}")
    return n


class TokenizerMixin:
    """For backends with a Hugging Face `self.tokenizer`."""

    tokenizer: object

    def count_tokens(self, text: str) -> int:
        return len(self._encode(text))

    def _encode(self, prompt: str) -> list[int]:
        # add_special_tokens as vLLM does (BOS for LLaMA; SmolLM2's tokenizer adds none).
        return self.tokenizer(prompt, add_special_tokens=True)["input_ids"]

    def _encode_continuation(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _score_ids(self, prompt: str, continuation: str) -> tuple[list[int], list[int], Generation | None]:
        """A `score` call's ids, and its whole answer when the continuation has no tokens."""
        p_ids, c_ids = self._encode(prompt), self._encode_continuation(continuation)
        empty = None if c_ids else Generation(text=continuation, entropies=[], logsumexp=[],
                                              n_prompt_tokens=len(p_ids))
        return p_ids, c_ids, empty

    def encode_plain(self, text: str) -> list[int]:
        """Token ids of `text` without special tokens (DRAGIN's retriever truncates these)."""
        return list(self._encode_continuation(text))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """`tokenizer.decode(ids)` with the tokenizer's own defaults, as DRAGIN's code calls it: a
        sentencepiece decoder drops the leading space of what it decodes ("▁is" alone is "is")."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)

    def _pieces(self, ids: Sequence[int], context: Sequence[int] = ()) -> list[str]:
        """Each token's text in context (see `decode_pieces`)."""
        return decode_pieces(self._decode, ids, context)
