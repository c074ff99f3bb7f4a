"""SeaKR's sampling constants (the official engine's): k = 20 samples per decision at temperature
1.0 with top-k 50 and top-p 0.9, seeded with 42. The backends' signatures, the call cache's key and
the methods take them from here; params/base.yaml states the same values for users, and a test
keeps the two equal. No imports: every layer may use it."""

K = 20
TEMPERATURE = 1.0
TOP_K = 50
TOP_P = 0.9
SEED = 42
