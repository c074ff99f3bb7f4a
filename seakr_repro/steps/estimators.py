"""Step 03: the estimators' scores of step 02's samples, the per-model threshold delta the
methods read, and the per-question columns the claims ledger pairs.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..core.config import Config
from ..core.errors import UserError
from ..core.io import write_json
from ..llm.model_info import middle_layer
from ..core.paths import results_dir

if TYPE_CHECKING:
    import pandas

    from .extraction import VectorStore


# ---------------------------------------------------------------------- estimators and delta
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


def estimator_scores(rows: list[dict], vectors: Sequence[np.ndarray] | None, params: dict,
                     names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """U per question for each registered estimator (`names`, default all), oriented so that
    higher = more uncertain, keyed by the estimator's setting name. `vectors`: per question the
    k x d vectors of the configured hook and layer (as stored), e.g. `vectors[hook][:, layer]`
    of `load_extraction`; params: `u_params(cfg)`."""
    from ..uncertainty import registry

    vecs = [None] * len(rows) if vectors is None else vectors
    if len(vecs) != len(rows):
        raise UserError(f"{len(vecs)} vector sets for {len(rows)} questions",
                        fix="pass one k x d array per row of load_extraction")
    stats = [registry.stats_from_row(row, v) for row, v in zip(rows, vecs)]
    return registry.score_all(stats, params, names)


def delta_path(cfg: Config, res: Path | None = None) -> Path:
    """Step 03's thresholds under the profile's results (or the results directory `res`)."""
    return (res or results_dir(cfg.profile)) / "calibration" / "delta.json"


def write_deltas(cfg: Config, deltas: dict[str, float], diagnostics: dict) -> Path:
    return write_json(delta_path(cfg), {"model": cfg["model.name"], "deltas": deltas,
                                        "diagnostics": diagnostics})


def calibrated_deltas(cfg: Config, res: Path | None = None) -> dict[str, float]:
    """The per-estimator thresholds step 03 wrote (DataMissingError before it ran)."""
    from ..core.errors import DataMissingError
    from ..core.io import read_json

    path = delta_path(cfg, res)
    if not path.is_file():
        raise DataMissingError("no calibrated delta yet", path=path,
                               fix="run notebook 03-uncertainty-estimators")
    return {k: float(v) for k, v in read_json(path)["deltas"].items()}


def read_deltas(cfg: Config, res: Path | None = None) -> dict[str, float]:
    """The thresholds the methods use. eigen: step 03's calibrated delta when
    `uncertainty.use_calibrated_delta` and step 03 ran, else `uncertainty.delta` (the paper
    profile: -6, fixed, as the official scripts). The other estimators have no official threshold:
    theirs always come from step 03 when it ran."""
    deltas = calibrated_deltas(cfg, res) if delta_path(cfg, res).is_file() else {}
    if not (cfg["uncertainty.use_calibrated_delta"] and "eigen" in deltas):
        deltas["eigen"] = float(cfg["uncertainty.delta"])
    return deltas


def question_scores(rows: list[dict], vectors: "VectorStore", cfg: Config, ks: Sequence[int],
                    scores: dict[str, np.ndarray] | None = None) -> "pandas.DataFrame":
    """Per question, what the claims ledger pairs (steps/claims.py): whether the closed-book
    answer is wrong, U of every registered estimator (`est:<name>`, eigen as `eigen`), eigen U at
    every layer (`layer:<l>`) and from the first k non-empty samples (`k:<k>`) at the configured
    hook, layer and variant. Reads one question's vectors at a time."""
    import pandas as pd

    hook = cfg["uncertainty.hook"]
    table = []
    for q, row in enumerate(rows):
        given = None if scores is None else {n: float(v[q]) for n, v in scores.items()}
        table.append(score_columns(row, vectors.question(q, hook), cfg, ks, given))
    return pd.DataFrame(table)


def score_columns(row: dict, layers: np.ndarray, cfg: Config, ks: Sequence[int],
                  estimators: dict[str, float] | None = None) -> dict:
    """`question_scores`' columns for one question: `layers` is its L x k x d vectors of the
    configured hook (rows of empty samples included); `estimators`: the question's U per
    estimator when already computed (step 03's `estimator_scores`), else computed here."""
    from ..uncertainty import eigen_score, registry

    params = u_params(cfg)
    layer = u_layer(cfg, layers.shape[0])
    keep = np.asarray(row["nonempty"], dtype=bool)
    cols = {"id": row["id"], "incorrect": int(not row["correct"]), "middle_layer": layer}
    if estimators is None:
        scored = registry.score_all([registry.stats_from_row(row, np.asarray(layers[layer], np.float32))],
                                    params)
        estimators = {name: float(values[0]) for name, values in scored.items()}
    for name, value in estimators.items():
        cols["eigen" if name == "eigen" else f"est:{name}"] = value
    for at in range(layers.shape[0]):
        cols[f"layer:{at}"] = eigen_score(np.asarray(layers[at], np.float32)[keep], alpha=params["alpha"],
                                         variant=params["variant"])
    mid = np.asarray(layers[layer], np.float32)[keep]
    for k in ks:
        cols[f"k:{k}"] = eigen_score(mid[:k], alpha=params["alpha"], variant=params["variant"])
    return cols
