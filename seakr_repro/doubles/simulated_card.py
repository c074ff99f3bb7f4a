"""A GPU card simulated on a CPU, for memory: what the tests, the benchmarks and the card check
on a CPU use to see what a card would hold, and to run out of it.

Memory (`SimulatedCard`, a torch dispatch mode): each tensor storage made on the CPU while the card
is active holds a block of CUDA's caching allocator (`caching_allocator.py`) until it is freed;
`allocated`, `reserved`, `peak_allocated` and `peak` (since `reset_peak()`) read as torch.cuda's
memory_allocated, memory_reserved, max_memory_allocated and max_memory_reserved. A `cap` limits
the reserved segments, as `set_per_process_memory_fraction` does. Tensors made while
`llm.hf.host_memory.allocating_on_host()` holds are host memory: what a decode call moves off the
card leaves it. `hold(module_or_tensors)` counts tensors made before the card was entered. A
model's weights all freed empty the cache and start the peaks over, as `runs.pool`'s
`free_accelerator_memory` does on a GPU: each model's peak is its own.

Prediction (`predict`): each counted tensor is given a kind (`llm.peak_memory.kind_of`, against the
model last built on the card, `adopt_model`), and for each target shape the card keeps the most
bytes the live tensors would take at that shape (`predicted`; llm/peak_memory.py says why a narrow
run with LLaMA-2-7B's layers and vocabulary predicts LLaMA-2-7B's).

`SEAKR_SIMULATED_CARD` (`ENV`, e.g. `1` or `total_gib=80,cap_gib=24`) and `activate_from_env()` put
a process on a card (`active()`, until `deactivate()`); or `with SimulatedCard(cap=...) as card:`.
A dispatch mode is per thread: the package decodes on the thread that calls the backend.
"""
from __future__ import annotations

import os
import threading
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import SIMULATED_CARD_ENV as ENV
from .caching_allocator import CachingAllocator
from .random_llama import MODEL_BUILT, SHAPES
from ..llm import peak_memory
from ..llm.hf import host_memory

GiB, MiB = 2**30, 2**20


class SimulatedCard(CachingAllocator, TorchDispatchMode):
    """See the module's note. `total`: the card's size; `cap`: the most torch may reserve (None: the
    card); `predict`: {name: shape} whose peaks to predict."""

    def __init__(self, total: int = 80 * GiB, cap: int | None = None,
                 predict: dict[str, str | dict] | None = None):
        TorchDispatchMode.__init__(self)
        CachingAllocator.__init__(self, cap)
        self.total = int(total)
        self._held: dict[int, tuple] = {}         # id(storage) -> (its bytes, its allocator block)
        self._host: set[int] = set()              # id(storage) of host copies (not counted)
        # prediction: target name -> its shape (a random_llama.SHAPES key or entry); the dims of the model on
        # the card, each kind's live bytes, each target's factors and the most its scaled total took
        self.targets = dict(predict or {})
        self.dims: peak_memory.Dims | None = None
        self.live = dict.fromkeys(peak_memory.KINDS, 0)
        self._kinds: dict[int, str] = {}
        self.factors: dict[str, dict[str, float]] = {}
        self.predicted: dict[str, int] = {}
        self.predicted_live: dict[str, dict[str, int]] = {}     # the live bytes by kind at that most
        self._lock = threading.RLock()
        self._before_simulate = False
        self._depth = 0

    # ------------------------------------------------------------------ counting
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self._see(t.untyped_storage(), t)
        return out

    def _see(self, storage, tensor: torch.Tensor | None = None, kind: str | None = None) -> None:
        key, size = id(storage), int(storage.nbytes())
        with self._lock:
            if key in self._host:
                return
            had = self._held.get(key, (None,))[0]
            if had == size:
                if self._kinds.get(key) == "other" and tensor is not None and self.dims is not None:
                    self._rekind(key, self._kind(tensor))     # a copied storage seen first as bytes (deepcopy)
                    self._predict()
                return
            if had is None and host_memory.allocating_on_host():
                self._host.add(key)
                weakref.finalize(storage, self._host.discard, key)
                return
            block = self.malloc(size)       # a storage resized in place: a new block, then the old freed
            if had is None:
                weakref.finalize(storage, self._free_storage, key)
                self._kinds[key] = kind or self._kind(tensor)
            else:
                self.free(self._held[key][1])
            self._held[key] = size, block
            self.live[self._kinds[key]] += size - (had or 0)
            self.context_open = True
            self._predict()

    def _free_storage(self, key: int) -> None:
        with self._lock:
            size, block = self._held.pop(key, (0, None))
            self.free(block)
            kind = self._kinds.pop(key, "other")
            self.live[kind] -= size
            if kind == "weights" and self.live["weights"] == 0:
                self.empty_cache()        # a model left the card: the next one's peak is its own
                self.reset_peak()

    # ------------------------------------------------------------------ prediction
    def _kind(self, tensor: torch.Tensor | None) -> str:
        if self.dims is None or tensor is None:
            return "other"
        return peak_memory.kind_of(tuple(tensor.shape), tensor.is_floating_point(), self.dims)

    def _rekind(self, key: int, kind: str) -> None:
        if kind != "other":
            self.live[self._kinds[key]] -= self._held[key][0]
            self.live[kind] += self._held[key][0]
            self._kinds[key] = kind

    def _predict(self) -> None:
        for name, factors in self.factors.items():
            total = peak_memory.scaled_total(self.live, factors)
            if total > self.predicted.get(name, -1):
                self.predicted[name] = total
                self.predicted_live[name] = {k: int(b * factors[k]) for k, b in self.live.items() if b}

    def adopt_model(self, model) -> None:
        """The model now on the card: its parameters and buffers count as weights, its dimensions
        tell the kinds of what the run makes, and each target's factors follow from them."""
        dtype = next(model.parameters()).dtype
        with self._lock:
            self.dims = peak_memory.Dims.of(model.config, dtype.itemsize)
            for t in list(model.parameters()) + list(model.buffers()):
                if t.device.type != "cpu":
                    continue
                storage = t.untyped_storage()
                key = id(storage)
                if key in self._held:
                    self._rekind(key, "weights")
                else:
                    self._see(storage, t, kind="weights")
            self.factors = {}
            for name, shape in self.targets.items():
                try:
                    spec = SHAPES[shape] if isinstance(shape, str) else shape
                    self.factors[name] = peak_memory.scales(self.dims, self.dims.at(spec))
                except ValueError as e:
                    self.predicted[name] = -1
                    self.predicted_live[name] = {"why": str(e)}
            self._predict()

    def hold(self, what) -> int:
        """Count tensors made before the card was entered (a module's parameters and buffers, or
        an iterable of tensors); returns the bytes added."""
        tensors = list(what.parameters()) + list(what.buffers()) if isinstance(what, torch.nn.Module) else list(what)
        before = self.allocated
        for t in tensors:
            if t.device.type == "cpu":
                self._see(t.untyped_storage())
        return self.allocated - before

    def reset_peak(self) -> None:
        """Start the peaks (and each target's predicted peak) over from what is held now."""
        with self._lock:
            CachingAllocator.reset_peak(self)
            self.predicted, self.predicted_live = {}, {}
            self._predict()

    # ------------------------------------------------------------------ entering
    def __enter__(self):
        with self._lock:
            if self._depth == 0:
                self._before_simulate = host_memory.simulate_on_cpu
                host_memory.simulate_on_cpu = True
            self._depth += 1
        _entered().append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _entered().remove(self)
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    host_memory.simulate_on_cpu = self._before_simulate


# ------------------------------------------------------------------ the process's card
_ACTIVE: list[SimulatedCard] = []


_THREAD = threading.local()


def _entered() -> list[SimulatedCard]:
    if not hasattr(_THREAD, "cards"):
        _THREAD.cards = []
    return _THREAD.cards


def current() -> SimulatedCard | None:
    """The card this thread runs under: the innermost it entered, else the process's."""
    cards = _entered()
    return cards[-1] if cards else active()


def _built(model) -> None:
    card = current()
    if card is not None:
        card.adopt_model(model)


MODEL_BUILT.append(_built)


def parse_spec(text: str) -> dict:
    """`SEAKR_SIMULATED_CARD`'s value -> SimulatedCard's arguments: `1` (the defaults) or
    comma-separated `total_gib=`, `cap_gib=`, `predict=` (shapes of random_llama.SHAPES whose
    peaks to predict, joined by +: llama-2-7b)."""
    text = text.strip()
    if text in ("1", "true", "yes", "on"):
        return {}
    units = {"total_gib": ("total", GiB), "cap_gib": ("cap", GiB)}
    out: dict = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, _, value = item.partition("=")
        if key == "predict" and value:
            wrong = [v for v in value.split("+") if v not in SHAPES]
            if wrong:
                raise ValueError(f"{ENV}={text!r}: predict={'+'.join(wrong)} is not a shape of {', '.join(SHAPES)}")
            out["predict"] = {v: v for v in value.split("+")}
        elif key in units and value:
            name, unit = units[key]
            out[name] = int(float(value) * unit)
        else:
            raise ValueError(f"{ENV}={text!r}: '{item}' is not one of 1, total_gib=, cap_gib=, predict= "
                             "(comma-separated)")
    return out


def activate(card: SimulatedCard) -> SimulatedCard:
    """Enter `card` for this thread and make it the process's (`active()`) until `deactivate()`."""
    card.__enter__()
    _ACTIVE.append(card)
    return card


def activate_from_env(environ=os.environ) -> SimulatedCard | None:
    """The process's card from `SEAKR_SIMULATED_CARD` (None when it is not set)."""
    text = environ.get(ENV)
    if not text:
        return None
    return activate(SimulatedCard(**parse_spec(text)))


def active() -> SimulatedCard | None:
    """The simulated card this process runs on, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def deactivate() -> None:
    if _ACTIVE:
        _ACTIVE.pop().__exit__(None, None, None)
