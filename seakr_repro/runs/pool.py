"""The one loaded backend of a local run (`BackendPool`) and freeing an accelerator's memory
between models. The Ray engine's pool (`fleet_backend.FleetPool`) answers the same `get`/`close`."""
from __future__ import annotations

from ..core.config import Config


class BackendPool:
    """The ONE loaded backend (the profile's model first): asking for another model closes the
    current one before loading it, so Self-RAG or a Table 4 backbone never shares the GPU with
    LLaMA-2-chat. `loader(cfg, name)` builds a backend (default: `llm.load_backend`); a dtype other
    than model.dtype (the faithful baselines' float32) is another load, `loader(cfg, name, dtype)`."""

    def __init__(self, cfg: Config, primary=None, loader=None):
        self.cfg = cfg
        self._loader = loader or _load_backend
        self._name, self._backend = (self._key(None, None), primary) if primary is not None else (None, None)
        self.loads = 0                       # backends loaded by the pool (a primary given is not)
        # label -> the dtype departure `run_grid` announced (baselines.dtype_when_too_large)
        self.departures: dict[str, str] = {}

    @property
    def loaded(self) -> tuple[str, str] | None:
        """(model name, dtype) of the backend loaded now, or None; read-only."""
        return self._name

    def card_bytes(self) -> int | None:
        """GPU memory the pool's transformers models load into (the card, or its cap); None off GPUs."""
        from ..core.device import usable_gpu_bytes

        if self.cfg.get("model.backend", "hf") != "hf" or self.cfg.get("model.device", "auto") == "cpu":
            return None
        return usable_gpu_bytes()

    def _key(self, name: str | None, dtype: str | None) -> tuple[str, str]:
        return name or self.cfg["model.name"], dtype or self.cfg.get("model.dtype", "float32")

    def get(self, name: str | None = None, dtype: str | None = None):
        key = self._key(name, dtype)
        if key != self._name:
            self.close()
            own_dtype = key[1] == self._key(None, None)[1]
            self._backend = (self._loader(self.cfg, key[0]) if own_dtype
                             else self._loader(self.cfg, key[0], key[1]))
            self._name = key
            self.loads += 1
        return self._backend

    def close(self) -> None:
        """Free the loaded backend's model (and its GPU memory) now."""
        backend, self._backend, self._name = self._backend, None, None
        if backend is None:
            return
        close = getattr(backend, "close", None)   # CachedBackend passes it to the backend it wraps
        if callable(close):
            close()
        del backend, close
        free_accelerator_memory()


def _load_backend(cfg: Config, name: str, dtype: str | None = None):
    from ..llm import load_backend

    return load_backend(cfg, name=name, dtype=dtype)


def free_accelerator_memory() -> None:
    """Collect what was dropped, hand the CUDA allocator's free blocks back and restart the peak
    count, so the next model's peak is its own (docs/measurements.md, "The card check")."""
    import gc

    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
