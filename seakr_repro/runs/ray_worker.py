"""What each Ray worker holds and answers, one question of any per-question loop per `run` call;
the driver's side (handing out questions, writing rows, replacing dead workers) is `fleet.Fleet`."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Callable

from ..core.errors import UserError


class Worker:
    """One backend at a time and the searcher, loaded on first use and kept, each method built once.
    `loader(cfg, name)` builds a backend (default `llm.load_backend`); `searcher` replaces the
    profile's index; `run` is what the driver runs (`core.disk_full.Run`), for a full disk's paragraph."""

    def __init__(self, cfg, loader: Callable | None = None, searcher=None, run=None):
        import threading

        if run is not None:
            from ..core import disk_full
            disk_full.set_run(run)
        self.cfg, self._loader, self._searcher = cfg, loader, searcher
        self._key, self._backend, self._methods = None, None, {}
        self.loads = 0
        # runner.concurrency > 1: questions share this actor on threads; one of them loads
        self._lock = threading.RLock()

    # -- what is loaded ------------------------------------------------------------------------
    def backend(self, model: str | None = None, cached: bool = True, dtype: str | None = None):
        """The backend of `model` (None: the profile's) in `dtype` (None: model.dtype); `cached` False =
        the call cache off, its counters on (Table 7's timing). Another one closes the loaded one."""
        key = (model or self.cfg["model.name"], bool(cached), dtype)
        with self._lock:
            if key != self._key:
                self.close()
                extra = {} if dtype is None else {"dtype": dtype}
                self._backend = ((self._loader or load_model)(self.cfg, key[0], **extra) if cached
                                 else load_model(self.cfg, key[0], cached=False, **extra))
                self._key = key
                self.loads += 1
            return self._backend

    def searcher(self):
        with self._lock:
            if self._searcher is None:
                from .inputs import open_profile_searcher
                self._searcher = open_profile_searcher(self.cfg)
            return self._searcher

    def method(self, spec: dict):
        """The method a task names, built once per (model, method, data set, settings)."""
        key = json.dumps([spec["model"], spec["cached"], spec.get("dtype"), spec["method"], spec["dataset"],
                          spec["settings"]], sort_keys=True, default=str)
        with self._lock:
            if key not in self._methods:
                from ..methods import build_method
                self._methods[key] = build_method(spec["method"], self._spec_backend(spec), self.searcher(),
                                                  spec["dataset"], **spec["settings"])
            return self._methods[key]

    def close(self) -> None:
        backend, self._backend, self._key = self._backend, None, None
        self._methods.clear()
        if backend is not None:
            close = getattr(backend, "close", None)
            if callable(close):
                close()
            from .pool import free_accelerator_memory
            del backend
            free_accelerator_memory()

    # -- what the driver asks ------------------------------------------------------------------
    def info(self) -> dict:
        """Where this worker runs and what it sees (for workers.json and preflight)."""
        import ray

        from ..retrieval.index import META_NAME, index_dir_for
        index = index_dir_for(self.cfg["corpus.name"], self.cfg["retrieval.backend"],
                              self.cfg["retrieval.scheme"])
        gpus = [str(g) for g in ray.get_gpu_ids()]
        memory = None
        if gpus:
            import torch
            if torch.cuda.is_available():
                memory = torch.cuda.get_device_properties(0).total_memory
        return {"pid": os.getpid(), "host": socket.gethostname(),
                "node": ray.get_runtime_context().get_node_id(), "gpus": gpus, "gpu_memory": memory,
                "index": str(index),
                "index_visible": self._searcher is not None or (Path(index) / META_NAME).is_file()}

    def describe(self, model: str | None = None, cached: bool = True, dtype: str | None = None) -> dict:
        b = self.backend(model, cached, dtype)
        return {k: getattr(b, k, None) for k in ("name", "n_layers", "hidden_size", "eos_token_id",
                                                 "kind", "fingerprint", "max_context")}

    def _spec_backend(self, spec: dict):
        return self.backend(spec["model"], spec["cached"], spec.get("dtype"))

    def method_info(self, spec: dict) -> dict:
        from .runner import one_at_a_time
        m = self.method(spec)
        return {"name": m.name, "config": m.config, "one_at_a_time": one_at_a_time(m, self._spec_backend(spec))}

    def run(self, task: tuple) -> Any:
        """One question of any loop: ("question", spec, record, scorer, concurrency), or
        ("call", fn, model, *args) = `fn(self, model, *args)`, a module-level function of the step
        that owns the loop (step 02's extraction, notebook 11's trials): Ray sends it by name, so
        this layer never imports the steps."""
        kind, *args = task
        if kind == "question":
            from .runner import answer_row, config_hash
            spec, record, scorer, concurrency = args
            method = self.method(spec)
            if config_hash(method.config) != spec["config_hash"]:
                # another version of the package on this node: its rows would not be the run's
                raise UserError(f"the worker on {socket.gethostname()} builds {spec['method']} with "
                                f"config {config_hash(method.config)}, the driver's run file is "
                                f"{spec['config_hash']}", setting="runner.ray_address",
                                fix="install the same checkout of seakr-repro (and its .venv) on every "
                                    "node, e.g. from a shared filesystem")
            return answer_row(method, record, self._spec_backend(spec), scorer, concurrency)
        if kind == "call":
            fn, *rest = args
            return fn(self, *rest)
        raise ValueError(f"unknown task {kind!r}")


def load_model(cfg, name: str | None = None, cached: bool = True, dtype: str | None = None):
    """`llm.load_backend` in `dtype`; `cached` False = the call cache off and its counters on."""
    from ..llm import load_backend
    extra = {} if dtype is None else {"dtype": dtype}
    if cached:
        return load_backend(cfg, name=name, **extra)
    from ..llm import CachedBackend
    return CachedBackend(load_backend(cfg, name=name, cache=False, **extra), enabled=False)
