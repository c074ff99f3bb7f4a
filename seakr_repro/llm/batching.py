"""Questions side by side on the transformers backend, which batches only the contexts of ONE
call: a `ThreadBatcher` merges the question threads' calls (docs/speed.md, "Questions side by
side"). Each question thread registers for its lifetime (`worker(backend)`); once every registered
thread waits, the largest group of waiting calls with the same settings runs as one batch. A
question's samples do not depend on who shares its batch (each context has its own generator).
Other calls run alone. It sits under the call cache, so hits never wait.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from .base import generate_and_sample_many, generate_many, layers, per_prompt

# A request that has waited this long with nothing running is run anyway: a registered thread
# may be blocked on something other than this backend (a thread of its own that waits here).
STALL_SECONDS = 0.5


@dataclass
class _Request:
    kind: str                       # "generate" | "sample" | "both" (generate_and_sample_many)
    prompts: list[str]
    kwargs: dict
    since: float = field(default_factory=time.monotonic)
    result: list | None = None
    error: BaseException | None = None
    done: bool = False

    def key(self) -> tuple:
        if self.kind == "both":          # per-prompt settings: any two such requests merge
            return (self.kind,)
        return (self.kind, tuple(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v)
                                        for k, v in self.kwargs.items())))


class ThreadBatcher:
    """A backend wrapper that batches the concurrent calls of registered question threads."""

    wraps_backend = True     # `base.unwrap` finds the model backend in `.backend`
    concurrent = True        # runner.concurrency > 1 is allowed on it

    def __init__(self, backend):
        self.backend = backend
        self._cv = threading.Condition()
        self._pending: list[_Request] = []
        self._workers = 0
        self._busy = False
        self._idle_since = time.monotonic()
        self.batches = 0                 # calls made on the wrapped backend for batched requests
        self.batched_requests = 0        # requests they served

    def __getattr__(self, attr: str) -> Any:    # name, n_layers, tokenizer, ... pass through
        try:
            backend = vars(self)["backend"]
        except KeyError:
            raise AttributeError(attr) from None
        return getattr(backend, attr)

    @contextlib.contextmanager
    def worker(self) -> Iterator[None]:
        """Count the calling thread as a question thread until the block ends."""
        with self._cv:
            self._workers += 1
        try:
            yield
        finally:
            with self._cv:
                self._workers -= 1
                self._cv.notify_all()

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False):
        if want_attention:      # DRAGIN's attention is not part of a batched call
            return self._alone(lambda: self.backend.generate(
                prompt, max_new_tokens=max_new_tokens, stop=stop, want_stats=want_stats,
                want_attention=True))
        return self.generate_many([prompt], max_new_tokens=max_new_tokens, stop=stop, want_stats=want_stats)[0]

    def generate_many(self, prompts: Sequence[str], *, max_new_tokens: int, stop: Sequence[str] = (),
                      want_stats: bool = False):
        return self._submit("generate", list(prompts), dict(max_new_tokens=max_new_tokens,
                                                             stop=tuple(stop), want_stats=want_stats))

    def sample(self, prompt: str, settings):
        return self.sample_many([prompt], settings)[0]

    def generate_and_sample_many(self, prompts: Sequence[str], *, generate, sample):
        """Merged with every other thread's such call, whatever its settings (each prompt's own)."""
        n = len(prompts)
        return self._submit("both", list(prompts), dict(generate=per_prompt(generate, n),
                                                         sample=per_prompt(sample, n)))

    def sample_many(self, prompts: Sequence[str], settings):
        return self._submit("sample", list(prompts), dict(settings=settings))

    def score(self, prompt: str, continuation: str):
        return self._alone(lambda: self.backend.score(prompt, continuation))

    def count_tokens(self, text: str) -> int:
        return self._alone(lambda: self.backend.count_tokens(text))

    def encode(self, text: str) -> list[int]:
        return self._alone(lambda: self.backend.encode(text))

    def words(self, token_ids):
        return self._alone(lambda: self.backend.words(token_ids))

    def attention_rows(self, token_ids, positions):
        return self._alone(lambda: self.backend.attention_rows(token_ids, positions))

    def eos_vectors_all_layers(self, prompt, completions):
        return self._alone(lambda: self.backend.eos_vectors_all_layers(prompt, completions))

    def _alone(self, fn):
        with self._cv:
            while self._busy:
                self._cv.wait()
            self._busy = True
        try:
            return fn()
        finally:
            with self._cv:
                self._busy = False
                self._idle_since = time.monotonic()
                self._cv.notify_all()

    def _submit(self, kind: str, prompts: list[str], kwargs: dict) -> list:
        if not prompts:
            return []
        req = _Request(kind, prompts, kwargs)
        with self._cv:
            self._pending.append(req)
            self._cv.notify_all()
            while not req.done:
                if not self._busy and self._pending and self._ready():
                    group = self._take_group()
                    self._busy = True
                    self._cv.release()
                    try:
                        self._run(group)
                    finally:
                        self._cv.acquire()
                        self._busy = False
                        self._idle_since = time.monotonic()
                        self._cv.notify_all()
                else:
                    self._cv.wait(timeout=STALL_SECONDS / 5)
        if req.error is not None:
            raise req.error
        return req.result

    def _ready(self) -> bool:
        """Every registered thread is waiting here (or nothing has run for STALL_SECONDS)."""
        if len(self._pending) >= self._workers:
            return True
        return time.monotonic() - self._idle_since >= STALL_SECONDS

    def _take_group(self) -> list[_Request]:
        """The largest group of pending requests with the same settings (the oldest on a tie), out
        of the queue. The others wait a round: SeaKR alternates greedy steps and samples, so the
        threads just served then often call with the waiting ones' settings and fall into step."""
        groups: dict[tuple, list[_Request]] = {}
        for r in self._pending:
            groups.setdefault(r.key(), []).append(r)
        chosen = max(groups.values(), key=lambda g: (len(g), -min(r.since for r in g)))
        taken = {id(r) for r in chosen}
        self._pending = [r for r in self._pending if id(r) not in taken]
        return chosen

    def _run(self, reqs: list[_Request]) -> None:
        """One call on the backend for requests with the same settings."""
        prompts = [p for r in reqs for p in r.prompts]
        kind, kwargs = reqs[0].kind, reqs[0].kwargs
        try:
            if kind == "generate":
                out = generate_many(self.backend, prompts, **kwargs)
            elif kind == "both":
                out = generate_and_sample_many(
                    self.backend, prompts, generate=[g for r in reqs for g in r.kwargs["generate"]],
                    sample=[sm for r in reqs for sm in r.kwargs["sample"]])
            else:
                out = self.backend.sample_many(prompts, **kwargs)
            self.batches += 1
            self.batched_requests += len(reqs)
            i = 0
            for r in reqs:
                r.result, i = list(out[i:i + len(r.prompts)]), i + len(r.prompts)
        except BaseException as e:  # noqa: BLE001 - handed to every waiting caller
            for r in reqs:
                r.error = e
        finally:
            with self._cv:
                for r in reqs:
                    r.done = True
                self._cv.notify_all()


def find_batcher(backend) -> ThreadBatcher | None:
    """The ThreadBatcher among `backend` and the backends it wraps, if any."""
    return next((b for b in layers(backend) if isinstance(b, ThreadBatcher)), None)


def worker(backend):
    """`ThreadBatcher.worker()` of the batcher under `backend`; a no-op context without one."""
    batcher = find_batcher(backend)
    return batcher.worker() if batcher is not None else contextlib.nullcontext()
