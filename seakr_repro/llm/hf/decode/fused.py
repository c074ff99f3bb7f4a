"""`fused`: `one_sync` with each decode step's shared-prefix attention as two fused kernels (the
prompt's part and the row's own part) merged by their log-sum-exps (`shared_prefix._fused_decode`):
the same softmax, the scores never materialised, so results equal one_sync's within float rounding."""
from __future__ import annotations

from .one_sync import OneSync


class Fused(OneSync):
    name = "fused"
    fused_attention = True
