"""Recovery from out-of-memory errors (any `torch.OutOfMemoryError`): ONE mechanism for every call
of the transformers backend (docs/speed.md, "Speed"). A failed call frees what can be rebuilt (the
kept prefix caches, torch's cached blocks), shrinks what it runs at once and runs again:
- one context: the rows per forward pass are halved from the widest pass the failed attempt ran
  (`note_rows`); the error goes through only when a single row does not fit;
- several contexts (`by_contexts`): the contexts per batch are halved for the rest of the run.
Results do not change (each context has its own generator). The runner copies `retries` and
`seconds` (the failed attempts' time) into each result row; the card check sets `attempts` to a
list, and `before_attempt`/`after_attempt(record)`, for each attempt's record.
"""
from __future__ import annotations

import time
import warnings
from typing import Callable

import torch

_MAX_ATTEMPTS = 64


class OutOfMemoryRetry:
    """`free` drops what the caller keeps that can be rebuilt; `name` labels the warnings."""

    def __init__(self, name: str, free: Callable[[], None], contexts_per_batch: int | None = None):
        self.name, self.free = name, free
        self.rows_per_forward: int | None = None     # None = all rows of a chunk in one pass
        self.contexts_per_batch = contexts_per_batch  # None = all contexts in one batch
        self.retries = 0
        self.seconds = 0.0
        self.widest = 0                               # rows of the widest pass of the attempt
        self.attempts: list[dict] | None = None       # each attempt's record, where a caller asks
        self.before_attempt: Callable[[], None] | None = None
        self.after_attempt: Callable[[dict], None] | None = None

    def note_rows(self, n: int) -> None:
        """A forward pass of `n` rows is about to run."""
        self.widest = max(self.widest, int(n))

    def _attempt(self, fn: Callable, give_up: Callable[[], bool]):
        """(True, fn()) or, after an out-of-memory error, (False, None); the error goes through
        when give_up() says nothing smaller is left to try."""
        self.widest = 0
        asked = {"rows_per_forward": self.rows_per_forward, "contexts_per_batch": self.contexts_per_batch}
        if self.before_attempt is not None:
            self.before_attempt()
        t0 = time.perf_counter()
        try:
            got = fn()
        except torch.OutOfMemoryError as e:     # torch.cuda.OutOfMemoryError included
            self.seconds += time.perf_counter() - t0
            self._record(asked, t0, f"out of memory: {e}")
            if give_up():
                raise
        else:
            self._record(asked, t0, "ok")
            return True, got
        return False, None     # outside the except block, so the failed pass's tensors can be freed

    def _record(self, asked: dict, t0: float, outcome: str) -> None:
        if self.attempts is None:
            return
        record = {**asked, "widest_pass_rows": self.widest, "seconds": round(time.perf_counter() - t0, 3),
                  "outcome": outcome[:300]}
        if self.after_attempt is not None:
            self.after_attempt(record)
        self.attempts.append(record)

    def _recovered(self, what: str, had: int, now: int) -> None:
        self.retries += 1
        self.free()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        warnings.warn(f"{self.name}: out of memory with {had} {what}; retrying with {now}", stacklevel=3)

    def run(self, fn: Callable):
        """fn() over one context, with fewer rows per forward pass after each out-of-memory."""
        for attempt in range(_MAX_ATTEMPTS):
            last = attempt == _MAX_ATTEMPTS - 1
            ok, got = self._attempt(fn, lambda last=last: (self.widest <= 1 and self.rows_per_forward == 1
                                                           or last))
            if ok:
                return got
            widest = self.widest
            self.rows_per_forward = max(1, widest // 2)
            self._recovered("rows in one pass", widest, self.rows_per_forward)

    def by_contexts(self, fn: Callable[[list], list], items: list) -> list:
        """fn(batch) over `items` in batches of `contexts_per_batch` (all when None), halved
        after an out-of-memory error in a batch of several."""
        out, i = [], 0
        while i < len(items):
            n = min(self.contexts_per_batch or len(items), len(items) - i)
            part = items[i:i + n]
            if n == 1:
                out += self.run(lambda part=part: fn(part))
                i += 1
                continue
            ok, got = self._attempt(lambda part=part: fn(part), lambda: False)
            if ok:
                out += got
                i += n
                continue
            self.contexts_per_batch = n // 2
            self._recovered("contexts in one batch", n, self.contexts_per_batch)
        return out
