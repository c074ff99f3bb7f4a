"""The `graph` decode path where no CUDA exists: each capture and replay runs the `static` step
eagerly, so a CPU run of the card check or the decode benchmark goes through the graph path's own
sequence (a warm-up step, one capture per part of a call, a replay for every later step) and its
counts (`graph.LOG`), and reports them, said to be simulated.

A simulated capture records nothing and costs nothing like a real one (no synchronisation, no
garbage collection, no emptied allocator cache), so its seconds and the steps' times say nothing
of a card; what it shows is that the code asked for the graph path, that the path captured once
per part and replayed every later step, and that the tokens are the static step's.

`simulate_graph()` puts it in place of the graph path in this process (the decode paths' table,
`llm.hf.decode.paths.STRATEGIES`) and returns a function that puts the real one back; a model on
a CUDA device is refused by it, so a real card never runs the simulation.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..llm.hf.decode import paths
from ..llm.hf.decode.graph import Graph, GraphStep
from ..llm.hf.decode.static import StaticStep

WHY = "no CUDA here: each capture and replay of the graph path runs the static step eagerly"


class _EagerReplay:
    """What a simulated capture leaves in place of a CUDA graph: a replay runs the step."""

    def __init__(self, step: "SimulatedGraphStep"):
        self.step = step

    def replay(self) -> None:
        self.step.out = StaticStep.run(self.step)


class SimulatedGraphStep(GraphStep):
    @staticmethod
    def memory_pool(device):
        return None

    def _warm_up(self):
        self.warm = True
        return StaticStep.run(self)

    def _capture(self) -> None:
        self.graph = _EagerReplay(self)


class SimulatedGraph(Graph):
    step_class = SimulatedGraphStep
    device_types = None
    simulated = WHY

    def check(self, device) -> None:
        if torch.device(device).type == "cuda":
            raise RuntimeError("the simulated graph path on a CUDA device: run the real graph path there "
                               "(do not call doubles.simulated_graph.simulate_graph in this process)")


def simulate_graph() -> Callable[[], None]:
    """Run the graph path as SimulatedGraph in this process; returns what undoes it."""
    before = paths.STRATEGIES["graph"]
    paths.STRATEGIES["graph"] = SimulatedGraph()

    def undo() -> None:
        paths.STRATEGIES["graph"] = before
    return undo
