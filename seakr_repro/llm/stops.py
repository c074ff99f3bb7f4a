"""Where a continuation stops, and which token sequence SeaKR's forced-EOS vector is read from,
for every backend and step 02 alike.

Stop strings are searched in the generated text only (as vLLM, the official engine, does),
decoded in context. The text is cut before the first stop string; `token_ids` keep the tokens
whose text lies entirely before it; `all_token_ids` every token up to the one that ended the
continuation. A sampled EOS is in neither.

The forced-EOS sequence (`uncertainty.forced_eos`; docs/faithful-and-fixed.md, "Forced-EOS
sequence of U's vectors"): "replace_last" (the official stop checker) overwrites the last
generated token with EOS and keeps every token before it ("... 1959." + EOS for the stop ". "
completed by "▁Ivania"; a sampled EOS is kept); "append" puts EOS after the kept tokens (those of
the returned text), so the vector describes exactly the text the method reads.
"""
from __future__ import annotations

from typing import Sequence

FORCED_EOS_MODES = ("replace_last", "append")


def find_stop(text: str, stop: Sequence[str]) -> int:
    """Index of the earliest stop string in `text`, or -1."""
    hits = [text.find(s) for s in stop if s and s in text]
    return min(hits) if hits else -1


def cut_at_stop(pieces: Sequence[str], stop: Sequence[str]) -> tuple[str, int]:
    """(text before the first stop string, number of tokens kept), from each token's text."""
    text = "".join(pieces)
    at = find_stop(text, stop)
    if at < 0:
        return text, len(pieces)
    n = end = 0
    while n < len(pieces) and end + len(pieces[n]) <= at:
        end += len(pieces[n])
        n += 1
    while n > 0 and pieces[n - 1] == "":
        n -= 1    # bytes of a character that is completed only after the cut
    return text[:at], n


def stop_end(pieces: Sequence[str], stop: Sequence[str]) -> int:
    """Number of tokens up to and including the one whose text completes the first stop string
    (len(pieces) when none does): where an engine checking after every token would have stopped."""
    text = ""
    for i, piece in enumerate(pieces):
        text += piece
        if stop and find_stop(text, stop) >= 0:
            return i + 1
    return len(pieces)


def check_forced_eos(mode: str) -> str:
    if mode not in FORCED_EOS_MODES:
        from ..core.errors import UserError
        raise UserError(f"unknown forced-EOS mode {mode!r}", setting="uncertainty.forced_eos",
                        fix=f"use one of {', '.join(FORCED_EOS_MODES)}")
    return mode


def forced_eos_ids(all_ids: Sequence[int], finish_reason: str, n_kept: int, eos_id: int,
                   mode: str) -> list[int]:
    """The generated part of the sequence whose last position (always EOS) gives the vector, from
    `all_ids` (the module's note), finish_reason stop | length | eos and n_kept returned tokens."""
    check_forced_eos(mode)
    if mode == "append" or finish_reason == "eos":
        return [*all_ids[:n_kept], eos_id] if mode == "append" else [*all_ids, eos_id]
    return [*all_ids[:-1], eos_id]


def forced_eos_of(gen, eos_id: int, mode: str) -> list[int]:
    """`forced_eos_ids` of a Generation (one that carries no uncut ids counts as uncut)."""
    all_ids = gen.token_ids if gen.all_token_ids is None else gen.all_token_ids
    return forced_eos_ids(all_ids, gen.finish_reason, len(gen.token_ids), eos_id, mode)
