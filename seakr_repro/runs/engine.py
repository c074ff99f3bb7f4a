"""Opening the profile's engine (`engine_choice`): a run grid's backend pool, one model, a method
on it, here or, on Ray, the driver's stand-ins (`fleet_backend`). Notebooks and steps open their
models here, so which engine runs them is the profile's choice alone."""
from __future__ import annotations

from .engine_choice import uses_ray
from .fleet import Fleet
from .fleet_backend import FleetBackend, FleetPool


def open_pool(cfg, primary: bool = True, **fleet_args):
    """The backend pool of the profile's engine: local (`primary`: its model loaded now) or Ray."""
    from .pool import BackendPool

    if uses_ray(cfg):
        return FleetPool(Fleet(cfg, **fleet_args))
    from ..llm import load_backend
    return BackendPool(cfg, load_backend(cfg) if primary else None)


def open_backend(cfg, cached: bool = True, dtype: str | None = None, **fleet_args):
    """The profile's model on the profile's engine: loaded here, or a `FleetBackend` on Ray workers
    (`cached`, `dtype`: `ray_worker.load_model`'s). Give it back with `close_backend`."""
    if uses_ray(cfg):
        fleet = Fleet(cfg, **fleet_args)
        try:
            return fleet.backend(cached=cached, dtype=dtype)
        except BaseException:
            fleet.close()
            raise
    from .ray_worker import load_model
    return load_model(cfg, cached=cached, dtype=dtype)


def close_backend(backend) -> None:
    """Free what `open_backend` gave: the model here, or the Ray workers."""
    close = getattr(getattr(backend, "fleet", None) or backend, "close", None)
    if callable(close):
        close()


def method_on(backend, name: str, searcher, dataset: str, settings: dict):
    """`methods.build_method` here, or its `RemoteMethod` when `backend` is a `FleetBackend`."""
    if isinstance(backend, FleetBackend):
        return backend.method(name, dataset, settings)
    from ..methods import build_method
    return build_method(name, backend, searcher, dataset, **settings)
