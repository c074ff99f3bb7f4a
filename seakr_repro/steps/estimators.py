"""Step 03: the estimators' scores of step 02's samples, the per-model threshold delta the
methods read, and the per-question columns the claims ledger pairs."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..core.config import Config
from ..core.errors import UserError
from ..core.io import write_json
from ..uncertainty.thresholds import delta_path, u_layer, u_params

if TYPE_CHECKING:
    import pandas

    from .extraction import VectorStore


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


def calibrate_thresholds(cfg: Config, scores: dict[str, np.ndarray], correct, rule: str,
                         target: float) -> tuple[dict[str, float], dict[str, dict]]:
    """Each registered estimator's delta calibrated on step 02's questions (`correct`: 1 where the
    closed-book answer is right), written where the methods read them (`delta_path`); returns
    (deltas, each calibration's diagnostics)."""
    from .. import uncertainty as unc
    from ..uncertainty import registry

    deltas, diagnostics = {}, {}
    for name in registry.ESTIMATORS:
        cal = unc.calibrate_delta(scores[name], correct, rule=rule, target=target)
        deltas[name] = float(cal.delta)
        diagnostics[name] = {k: (float(v) if isinstance(v, (float, np.floating)) else v)
                             for k, v in vars(cal).items() if k != "sweep"}
    write_json(delta_path(cfg), {"model": cfg["model.name"], "deltas": deltas, "diagnostics": diagnostics})
    return deltas, diagnostics


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
