"""Prompt text <-> token ids, the same way in every backend, so that backends see identical ids."""
from __future__ import annotations

from typing import Sequence


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

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)
