"""`graph`: the `static` decode step captured as a CUDA graph and replayed (CUDA only): a replay
launches the step's thousands of kernels at once, each of which alone costs the host more than the card.

Per part of the call (`static.StaticRows`): the first step runs eagerly on a side stream (lazy
set-up outside any capture), the second is captured, every step is a replay; the parts share one
memory pool (docs/speed.md, "CUDA graphs: how they are built"). `LOG` lets a benchmark time the
replays apart from the capture and a report show that `graph` ran. Off CUDA the path is refused,
never run eagerly in its place (`static` is that); an out-of-memory error while capturing reaches
the out-of-memory retry as one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .static import Static, StaticStep


@dataclass
class CaptureLog:
    """`first_capture_at`: time.perf_counter() at the first capture since the last `mark()`."""
    captures: int = 0
    replays: int = 0
    capture_seconds: float = 0.0
    first_capture_at: float | None = None

    def captured(self, started: float, ended: float) -> None:
        self.captures += 1
        self.capture_seconds += ended - started
        if self.first_capture_at is None:
            self.first_capture_at = started

    def mark(self) -> dict:
        """The counts now (to difference later with `since`); forgets `first_capture_at`."""
        self.first_capture_at = None
        return {"captures": self.captures, "replays": self.replays, "capture_seconds": self.capture_seconds}

    def since(self, mark: dict) -> dict:
        """Captures, replays and capture seconds since `mark`, and the first capture's start."""
        return {"captures": self.captures - mark["captures"], "replays": self.replays - mark["replays"],
                "capture_seconds": self.capture_seconds - mark["capture_seconds"],
                "first_capture_at": self.first_capture_at}


LOG = CaptureLog()


class GraphStep(StaticStep):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.warm = False
        self.out: torch.Tensor | None = None

    @staticmethod
    def memory_pool(device):
        return torch.cuda.graph_pool_handle()

    def run(self) -> torch.Tensor:
        if self.graph is None:
            if not self.warm:
                return self._warm_up()
            started = time.perf_counter()
            self._capture()
            LOG.captured(started, time.perf_counter())
        self.graph.replay()
        LOG.replays += 1
        return self.out

    def _warm_up(self) -> torch.Tensor:
        main = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            out = super().run()
        main.wait_stream(side)
        out.record_stream(main)           # made on the side stream, read on the main one
        self.warm = True
        return out

    def _capture(self) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: another thread's CUDA calls (a runner thread of the same process) do
            # not invalidate the capture
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                self.out = super().run()
        except RuntimeError as e:      # torch.OutOfMemoryError is one, possibly raised as the context
            cause = e if isinstance(e, torch.OutOfMemoryError) else e.__context__
            if isinstance(cause, torch.OutOfMemoryError) and cause is not e:
                raise torch.OutOfMemoryError(f"while capturing the decode step: {cause}") from e
            raise
        self.graph = graph


class Graph(Static):
    name = "graph"
    step_class = GraphStep
    device_types = ("cuda",)

    def check(self, device: torch.device) -> None:
        if not self.runs_on(device):
            from ....core.errors import UserError
            raise UserError(f"decode path 'graph' captures the decode step as a CUDA graph, and the "
                            f"model is on {device}", setting="model.decode",
                            fix="use model.decode: static (the same step, run eagerly) on this device, "
                                "or load the model on a CUDA GPU")
