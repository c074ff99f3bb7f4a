"""seakr-repro: a reproducibility package for SeaKR (self-aware knowledge retrieval for adaptive RAG).

Everything the numbered notebooks do lives here, importable and tested. See the README for the
two commands (`make reproduce`, `make test`) and DESIGN.md for the architecture."""

__version__ = "0.1.0"

# Before anything below imports torch: a fair share of the cores on a busy machine (core/threads.py).
from .core import threads as _threads  # noqa: E402
# ... and before anything can import bm25s (which imports JAX): JAX kept off the GPU (core/jax_env.py).
from .core import jax_env as _jax_env  # noqa: E402

_threads.apply()
_jax_env.apply()
