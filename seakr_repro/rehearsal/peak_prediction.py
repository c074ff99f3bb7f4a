"""Each method's peak at LLaMA-2-7B's shape, predicted before a GPU measures it: what the
rehearsal's methods part reports beside the peak it measures (`peak_fields`).

PREDICTIONS is the committed prediction (`python -m seakr_repro.rehearsal.predict_peaks` makes it;
docs/measurements.md holds its table and arithmetic): {profiles: {profile: {method: {dtype:
{predicted_peak_bytes (7B), predicted_by_kind, peak_bytes (measured at the narrow shape), ...}}}}}.
On a GPU the methods part adds, per method, the peak it measured and the committed prediction for
its profile, method and the dtype it loaded in; on a CPU under a simulated card that predicts 7B
(doubles/simulated_card.py), this run's own prediction.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..core.paths import REPO_ROOT
from .device import peak_bytes

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


def peak_fields(ctx, profile: str, method: str, dtype: str | None) -> dict:
    """What the methods part adds to a method's entry: the peak it measured in bytes (the GPU's, or
    the simulated card's), the 7B peak predicted (this run's where it runs on a simulated card that
    predicts 7B, else the committed one), and the two side by side."""
    from ..doubles.simulated_card import active

    out: dict = {"peak_bytes": peak_bytes(ctx.device)}
    card = active()
    live = card.predicted.get(TARGET) if card is not None else None
    if live is not None:
        out["predicted_7b"] = ({"peak_bytes": live, "by_kind": card.predicted_live[TARGET], "from": "this run"}
                               if live > 0 else {"why": card.predicted_live[TARGET].get("why")})
        if len(card.predicted) > 1:          # other shapes too: the check of the prediction
            out["predicted_at"] = dict(card.predicted)
        return out
    got = predicted(profile, method, dtype)
    if got is None:
        out["predicted_7b"] = {"why": f"no prediction for {profile}/{method}/{dtype} in {PREDICTIONS.name}"}
        return out
    bytes_ = got["predicted_peak_bytes"]
    out["predicted_7b"] = {"peak_bytes": bytes_, "peak_gib": round(bytes_ / GiB, 2),
                           "from": f"{PREDICTIONS.name} ({got['commit']})"}
    if out["peak_bytes"] is not None and ctx.paper_shape:
        out["measured_over_predicted"] = round(out["peak_bytes"] / got["predicted_peak_bytes"], 3)
    return out
