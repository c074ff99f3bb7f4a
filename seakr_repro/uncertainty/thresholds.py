"""The profile's U as the methods use it: the estimator parameters and layer the settings name,
and the retrieval thresholds δ that step 03 calibrates. Step 03 (`steps.estimators`) writes the
thresholds; the run grid and the render step read them from here."""
from __future__ import annotations

from pathlib import Path

from ..core.config import Config
from ..core.errors import DataMissingError, UserError
from ..core.io import read_json
from ..core.paths import results_dir
from ..llm.model_info import middle_layer


def u_params(cfg: Config) -> dict:
    """The estimator parameters of the profile (the same keys the methods' settings carry)."""
    return {"alpha": cfg["uncertainty.alpha"], "variant": cfg["uncertainty.variant"]}


def u_layer(cfg: Config, n_layers: int) -> int:
    """`uncertainty.layer` resolved for a model of n_layers ("middle" = L/2 - 1)."""
    layer = cfg["uncertainty.layer"]
    layer = middle_layer(n_layers) if layer == "middle" else int(layer)
    if not 0 <= layer < n_layers:
        raise UserError(f"uncertainty.layer {layer} is outside 0..{n_layers - 1}",
                        setting="uncertainty.layer", fix="use middle or a layer of the model")
    return layer


def delta_path(cfg: Config, res: Path | None = None) -> Path:
    """Step 03's thresholds under the profile's results (or the results directory `res`)."""
    return (res or results_dir(cfg.profile)) / "calibration" / "delta.json"


def calibrated_deltas(cfg: Config, res: Path | None = None) -> dict[str, float]:
    """The per-estimator thresholds step 03 wrote (DataMissingError before it ran)."""
    path = delta_path(cfg, res)
    if not path.is_file():
        raise DataMissingError("no calibrated delta yet", path=path,
                               fix="run notebook 03-uncertainty-estimators")
    return {k: float(v) for k, v in read_json(path)["deltas"].items()}


def read_deltas(cfg: Config, res: Path | None = None) -> dict[str, float]:
    """The thresholds the methods use. eigen: step 03's when `uncertainty.use_calibrated_delta` and
    step 03 ran, else `uncertainty.delta` (the paper profile: -6, as the official scripts); the
    others have no official threshold: step 03's when it ran."""
    deltas = calibrated_deltas(cfg, res) if delta_path(cfg, res).is_file() else {}
    if not (cfg["uncertainty.use_calibrated_delta"] and "eigen" in deltas):
        deltas["eigen"] = float(cfg["uncertainty.delta"])
    return deltas
