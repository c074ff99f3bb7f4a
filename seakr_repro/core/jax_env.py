"""Keep JAX off the GPU that torch needs.

bm25s imports JAX when it is installed, and JAX at its first use on CUDA takes 75% of the card
before any model is built (docs/measurements.md, "The card check"); the package uses JAX only for
a small top-k the CPU does as well. JAX reads its variables at import, so `apply()` runs at
`import seakr_repro`, and children inherit them. A user's own JAX setup is never overruled:
- JAX_PLATFORMS=cpu unless any JAX or XLA variable is set (who tuned JAX wants it on the GPU);
- XLA_PYTHON_CLIENT_PREALLOCATE=false unless an XLA_PYTHON_CLIENT_* memory variable is set
  (preallocate beside a fraction would change what the fraction means).
The same rule in a child gives the same values, so no record of who set what is needed."""
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
    if any(v in environ for v in MEMORY_VARIABLES):
        return {}
    platform = {} if any(v in environ for v in PLATFORM_VARIABLES) else {"JAX_PLATFORMS": DEFAULTS["JAX_PLATFORMS"]}
    return {**platform, "XLA_PYTHON_CLIENT_PREALLOCATE": DEFAULTS["XLA_PYTHON_CLIENT_PREALLOCATE"]}


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
