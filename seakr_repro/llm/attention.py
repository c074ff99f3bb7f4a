"""DRAGIN's words of a token sequence, shared by the backends: a new word starts at the first
token, at a piece with the word-start marker ("▁" for SentencePiece, "Ġ" for byte-level BPE), at
the newline token and after an EOS; its text is its pieces joined, the marker removed."""
from __future__ import annotations

from functools import cached_property
from typing import Sequence


def merge_words(ids: Sequence[int], pieces: Sequence[str], marker: str, newline_id: int | None,
                eos_id: int | None) -> list[tuple[int, int, str]]:
    """[(first token, last token, word text)] of a token sequence, DRAGIN's merge."""
    ranges: list[list[int]] = []
    for i, (tid, piece) in enumerate(zip(ids, pieces)):
        if (i == 0 or (marker and piece.startswith(marker)) or tid == newline_id
                or ids[i - 1] == eos_id):
            ranges.append([i, i])
        else:
            ranges[-1][1] = i
    return [(a, b, "".join(pieces[a:b + 1]).replace(marker, "") if marker else
             "".join(pieces[a:b + 1])) for a, b in ranges]


class WordsMixin:
    """`encode` and `words` for backends with a Hugging Face `self.tokenizer` (and `_encode`)."""

    tokenizer: object
    eos_token_id: int

    @cached_property
    def _word_marker(self) -> str:
        # SentencePiece tokenizers mark word starts with "▁"; byte-level BPE puts the space into
        # the piece ("Ġ"), which is the piece of " " alone (DRAGIN's rule for non-LLaMA models)
        if any(p.startswith("\u2581") for p in self.tokenizer.tokenize("a b")):
            return "\u2581"
        pieces = self.tokenizer.tokenize(" ")
        return pieces[0] if pieces else ""

    @cached_property
    def _newline_id(self) -> int | None:
        ids = self.tokenizer("\n", add_special_tokens=False)["input_ids"]
        return ids[-1] if ids else None        # LLaMA: "<0x0A>" (13), the id DRAGIN's code tests

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def piece_words(self, token_ids: Sequence[int]) -> list[tuple[int, int, str]]:
        """The words as DRAGIN's code writes them: pieces joined, the marker removed, byte-fallback
        pieces kept by name ("followers<0x3B>", "<0x0A>Question")."""
        ids = [int(t) for t in token_ids]
        return merge_words(ids, self.tokenizer.convert_ids_to_tokens(ids), self._word_marker,
                           self._newline_id, self.eos_token_id)

    def words(self, token_ids: Sequence[int]) -> list[tuple[int, int, str]]:
        ids = [int(t) for t in token_ids]
        spans = self.piece_words(ids)
        # a word's text is its tokens decoded together, so byte-fallback pieces ("<0xC3><0xBC>")
        # read as the character they spell rather than as piece names
        return [(a, b, self.tokenizer.decode(ids[a:b + 1]).strip()) for a, b, _ in spans]
