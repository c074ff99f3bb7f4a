"""Each method's peak at LLaMA-2-7B's shape, predicted before a GPU measures it, beside the peak
the check measures (`peak_fields`).

PREDICTIONS is the committed prediction (`python -m seakr_repro.card_check.predict_peaks` makes it;
docs/measurements.md holds its table and arithmetic): {profiles: {profile: {method: {dtype:
{predicted_peak_bytes, predicted_by_kind, peak_bytes (measured at the narrow shape), ...}}}}}. On a
CPU under a simulated card that predicts 7B (doubles/simulated_card.py), this run's own prediction.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..core.paths import REPO_ROOT

PREDICTIONS = REPO_ROOT / "data" / "measured" / "predicted-peaks.json"
TARGET = "llama-2-7b"
GiB = 2**30


def predicted(profile: str, method: str, dtype: str | None, path: Path = PREDICTIONS) -> dict | None:
    """The committed prediction of `method`'s 7B peak under `profile` in `dtype`, or None."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    got = ((doc.get("profiles") or {}).get(profile) or {}).get(method, {}).get(dtype or "")
    return None if got is None else {**got, "commit": doc.get("commit")}


def peak_fields(profile: str, method: str, dtype: str | None) -> dict:
    """The 7B peak predicted for the run that just ended: this run's where it runs on a simulated
    card that predicts 7B (with `predicted_at`, the other shapes it predicts), else the committed
    one; {"why"} where there is none."""
    from ..doubles.simulated_card import active

    card = active()
    live = card.predicted.get(TARGET) if card is not None else None
    if live is not None:
        if live <= 0:
            return {"why": card.predicted_live[TARGET].get("why")}
        return {"peak_bytes": live, "by_kind": card.predicted_live[TARGET], "from": "this run",
                **({"predicted_at": dict(card.predicted)} if len(card.predicted) > 1 else {})}
    got = predicted(profile, method, dtype)
    if got is None:
        return {"why": f"no prediction for {profile}/{method}/{dtype} in {PREDICTIONS.name}"}
    return {"peak_bytes": got["predicted_peak_bytes"], "from": f"{PREDICTIONS.name} ({got['commit']})"}
