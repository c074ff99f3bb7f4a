"""The LLM layer: a backend protocol (`base`), model facts (`model_info`), the model registry, the
transformers and vLLM backends and an on-disk call cache. Importing this package does not import
torch; `HFBackend` loads lazily."""
from .base import Backend, Generation, SampleSet
from .cache import CachedBackend, LLMCache
from .model_info import middle_layer
from .registry import MODELS, ModelSpec, get_spec, load_backend, model_dir

__all__ = ["Backend", "Generation", "SampleSet", "CachedBackend", "LLMCache", "MODELS", "ModelSpec",
           "get_spec", "load_backend", "middle_layer", "model_dir", "HFBackend"]


def __getattr__(name):
    if name == "HFBackend":   # imports torch and transformers: only when asked for
        from .hf.backend import HFBackend
        return HFBackend
    raise AttributeError(name)
