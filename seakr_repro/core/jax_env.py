"""Keep JAX off the GPU that torch needs.

bm25s (the pure-Python BM25 backend) imports JAX when it is installed and runs `jax.lax.top_k` at
import (bm25s/selection.py). JAX, at its first use on a CUDA machine, takes 75% of the card
(XLA_PYTHON_CLIENT_PREALLOCATE defaults to true), before any model is built, and the models then
run out of memory (docs/measurements.md, "The card check", has the first GPU run). On the 24 GB card
of the paper profile that would leave about 6 GB, less than LLaMA-2-7B's weights. The package's
only use of JAX is that top-k over a few thousand scores, which the CPU does as well.

JAX reads these variables when it is imported, so `apply()` runs at `import seakr_repro`, before
anything that can bring bm25s in; children (papermill kernels, Ray workers, the card check's
parts) inherit them. The rule, chosen so a user's own JAX setup is never overruled:
- JAX_PLATFORMS=cpu, unless the user set any JAX or XLA variable (JAX_PLATFORMS, the older
  JAX_PLATFORM_NAME, or an XLA_PYTHON_CLIENT_* memory setting): someone who tuned JAX's GPU
  memory wants JAX on the GPU, and their platform choice stands.
- XLA_PYTHON_CLIENT_PREALLOCATE=false, unless the user set one of the XLA_PYTHON_CLIENT_* memory
  variables (preallocate, mem fraction, allocator): those are their memory policy, and setting
  preallocate beside a fraction would change what the fraction means. So a user who only chose
  JAX_PLATFORMS=cuda gets JAX on the GPU growing on demand, not 75% of it taken up front. With
  JAX on the CPU it changes nothing; it is there for a JAX that reaches the GPU anyway (the user's
  platform choice, or code that sets jax_platforms itself).
A value a parent process of the package set is inherited and kept: the same rule gives the same
values in the child, so it needs no record of who set what (unlike core/threads.py's load-driven
setting).
"""
from __future__ import annotations

import os
import sys

PLATFORM_VARIABLES = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME")
MEMORY_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                    "XLA_PYTHON_CLIENT_ALLOCATOR")
DEFAULTS = {"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def jax_env(environ=None) -> dict[str, str]:
    """The variables to add to `environ` (default: this process's) by the rule above."""
    environ = os.environ if environ is None else environ
    user_memory = any(v in environ for v in MEMORY_VARIABLES)
    out = {}
    if not user_memory and not any(v in environ for v in PLATFORM_VARIABLES):
        out["JAX_PLATFORMS"] = DEFAULTS["JAX_PLATFORMS"]
    if not user_memory:
        out["XLA_PYTHON_CLIENT_PREALLOCATE"] = DEFAULTS["XLA_PYTHON_CLIENT_PREALLOCATE"]
    return out


def apply() -> dict[str, str]:
    """Put `jax_env()` into this process's environment; returns what it set. A JAX imported before
    the package read its variables already: say so (its memory is then the caller's to manage)."""
    added = jax_env()
    os.environ.update(added)
    if added and "jax" in sys.modules:
        import warnings
        warnings.warn("jax was imported before seakr_repro, so JAX_PLATFORMS=cpu and "
                      "XLA_PYTHON_CLIENT_PREALLOCATE=false came too late for it; import seakr_repro "
                      "first, or set them yourself, or JAX may take 75% of the GPU", stacklevel=2)
    return added
