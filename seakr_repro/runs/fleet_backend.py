"""What the driver of a Ray run holds in place of a loaded model, its methods and its pool: the
loops take them as they take the local ones and hand each question to the fleet's workers."""
from __future__ import annotations


class FleetBackend:
    """The driver's handle on one model as the workers of `fleet` hold it: its name and shapes
    (asked of a worker, which loads it) and `method`. `concurrent` is True because the worker's
    own backend decides: `RemoteMethod` carries its answer."""

    concurrent = True

    def __init__(self, fleet, model: str | None = None, cached: bool = True, dtype: str | None = None):
        self.fleet, self.model, self.cached, self.dtype = fleet, model or fleet.cfg["model.name"], cached, dtype
        for key, value in fleet.call("describe", self.model, cached, dtype).items():
            setattr(self, key, value)

    def method(self, method: str, dataset: str, settings: dict) -> "RemoteMethod":
        spec = {"model": self.model, "cached": self.cached, "dtype": self.dtype, "method": method,
                "dataset": dataset, "settings": dict(settings)}
        return RemoteMethod(spec, self.fleet.call("method_info", spec))

    def close(self) -> None:
        """Nothing here: each worker holds its own copy (the fleet closes them)."""


class RemoteMethod:
    """A method as the workers build it (name, config, one_question_at_a_time); `task` for `Fleet.map`."""

    def __init__(self, spec: dict, info: dict):
        from .runner import config_hash

        self.name, self.config = info["name"], info["config"]
        self.spec = {**spec, "config_hash": config_hash(self.config)}   # every worker checks it
        self.one_question_at_a_time = info["one_at_a_time"]

    def task(self, record, scorer=None, concurrency: int = 1) -> tuple:
        return ("question", self.spec, record, scorer, concurrency)


class FleetPool:
    """`pool.BackendPool` on Ray workers: `get(name)` gives a `FleetBackend`; `close` stops them."""

    def __init__(self, fleet):
        self.fleet, self.cfg = fleet, fleet.cfg

    def get(self, name: str | None = None, dtype: str | None = None) -> FleetBackend:
        return self.fleet.backend(name, dtype=dtype)

    def close(self) -> None:
        self.fleet.close()
