"""Two runs of one profile side by side (float32 against bfloat16, say): every row of the claims
ledger and every estimator's AUROC, run A against run B.

    python -m seakr_repro compare-runs results/default results-bf16/default \
        [--profile default] [--labels float32,bfloat16] [--out DIR]

Each directory is a profile's results folder (SEAKR_RESULTS_DIR elsewhere for the second run).
The ledger is measured in each as `render` measures it (steps/claims.py), a row matched by claim,
source and place: A's and B's difference with its 95% interval and verdict, B - A, whether the
verdict flipped and whether B lies outside A's interval. Estimator AUROCs come from the per-question
scores (SCORE_FILES) on the questions both runs scored: each run's AUROC with its interval, and the
paired bootstrap interval of B - A (each run judged by its own answers' correctness).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..core.errors import UserError
from ..artifacts import CALIBRATION, MECHANISMS
from ..steps.claims import INPUTS, measure_claims, paired_statistic

# per-question estimator scores (a subset of the ledger's INPUTS)
SCORE_FILES = (f"{CALIBRATION}/question_scores.csv", f"{MECHANISMS}/retrieval_scores.csv")


def _check_dir(path: Path) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"results directory {path} does not exist",
                        fix="give a profile's results folder, e.g. results/default")
    if not any((path / name).is_file() for name in INPUTS):
        raise UserError(f"{path} holds none of the results the ledger reads ({', '.join(INPUTS)})",
                        fix="give the folder `make reproduce` wrote, e.g. results/default")
    return path


def _keyed(measurements) -> dict:
    """{(claim, source, place): Measurement}: the n-th measurement of a claim from one source."""
    seen: dict = {}
    out = {}
    for m in measurements:
        place = seen.get((m.claim, m.source), 0)
        seen[(m.claim, m.source)] = place + 1
        out[(m.claim, m.source, place)] = m
    return out


def _outside(x: float, low: float, high: float) -> bool | None:
    if any(math.isnan(v) for v in (x, low, high)):
        return None
    return bool(not (low <= x <= high))


def compare_ledgers(cfg, dir_a, dir_b, labels=("A", "B"), n_boot: int | None = None) -> pd.DataFrame:
    """One row per ledger measurement found in either run."""
    a, b = (_keyed(measure_claims(cfg, n_boot, res=d)[0]) for d in (dir_a, dir_b))
    la, lb = labels
    rows = []
    for key in list(dict.fromkeys([*a, *b])):
        ma, mb = a.get(key), b.get(key)
        first = ma or mb
        row = {"claim": key[0], "measurement": first.what, "source": key[1], "unit": first.unit}
        if ma and mb and ma.what != mb.what:
            row["measurement"] += f" ({lb}: {mb.what})"
        for label, m in ((la, ma), (lb, mb)):
            row.update({f"{label} diff": m.diff if m else math.nan, f"{label} low": m.low if m else math.nan,
                        f"{label} high": m.high if m else math.nan, f"{label} n": m.n if m else 0,
                        f"{label} verdict": m.verdict if m else "not measured"})
        row[f"{lb} - {la}"] = (mb.diff - ma.diff) if ma and mb else math.nan
        row["verdict flipped"] = bool(ma and mb and ma.verdict != mb.verdict)
        row[f"{lb} outside {la}'s interval"] = (_outside(mb.diff, ma.low, ma.high) if ma and mb else None)
        rows.append(row)
    return pd.DataFrame(rows)


def _auroc_change(xa, ya, xb, yb):
    """stat(idx) = AUROC of run B - AUROC of run A on the questions idx, each with its own labels."""
    from ..uncertainty.analysis import auroc

    return lambda idx: auroc(xb[idx], yb[idx]) - auroc(xa[idx], ya[idx])


def compare_aurocs(dir_a, dir_b, labels=("A", "B"), n_boot: int = 1000, seed: int = 0,
                   confidence: float = 0.95) -> pd.DataFrame:
    """Per score file and estimator: each run's AUROC of "this answer is wrong" with its interval, B - A paired."""
    from ..uncertainty.analysis import auroc_ci

    la, lb = labels
    rows = []
    for name in SCORE_FILES:
        pa, pb = Path(dir_a) / name, Path(dir_b) / name
        if not (pa.is_file() and pb.is_file()):
            continue
        sa, sb = pd.read_csv(pa), pd.read_csv(pb)
        keys = [c for c in ("id", "condition") if c in sa.columns and c in sb.columns]
        if "id" not in keys:
            raise UserError(f"{name} has no id column in both runs", path=pa,
                            fix="re-run its notebook with this version (it writes one id per question)")
        both = sa.merge(sb, on=keys, suffixes=(" a", " b"))
        ya, yb = both["incorrect a"].to_numpy(int), both["incorrect b"].to_numpy(int)
        for col in [c for c in sa.columns if (c == "eigen" or c.startswith("est:")) and c in sb.columns]:
            xa, xb = both[f"{col} a"].to_numpy(float), both[f"{col} b"].to_numpy(float)
            ci_a = auroc_ci(xa, ya, n_boot=n_boot, seed=seed, level=confidence)
            ci_b = auroc_ci(xb, yb, n_boot=n_boot, seed=seed, level=confidence)
            d = paired_statistic(f"AUROC {col}", 1, _auroc_change(xa, ya, xb, yb), len(both), "AUROC",
                                 n_boot=n_boot, seed=seed, confidence=confidence)
            rows.append({"scores": name, "estimator": col.removeprefix("est:"), "questions": len(both),
                         f"{la} AUROC": ci_a[0], f"{la} low": ci_a[1], f"{la} high": ci_a[2],
                         f"{lb} AUROC": ci_b[0], f"{lb} low": ci_b[1], f"{lb} high": ci_b[2],
                         f"{lb} - {la}": d.diff, "low": d.low, "high": d.high,
                         f"{lb} outside {la}'s interval": _outside(ci_b[0], ci_a[1], ci_a[2])})
    return pd.DataFrame(rows)


def parse_labels(text: str) -> tuple[str, str]:
    """`--labels a,b`: the two runs' names."""
    labels = tuple(x.strip() for x in text.split(","))
    if len(labels) != 2 or labels[0] == labels[1]:
        raise UserError(f"--labels needs two different names (got {text})", setting="--labels",
                        fix="e.g. --labels float32,bfloat16")
    return labels


def compare(cfg, run_a, run_b, labels=("A", "B"), n_boot: int | None = None,
            out=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Print the ledger and the AUROCs of two results folders side by side; `out`: write them there too."""
    from ..core.io import atomic_open

    dir_a, dir_b = _check_dir(run_a), _check_dir(run_b)
    n_boot = int(n_boot or cfg["evaluation.bootstrap_samples"])
    ledger = compare_ledgers(cfg, dir_a, dir_b, labels, n_boot)
    aurocs = compare_aurocs(dir_a, dir_b, labels, n_boot, int(cfg["seed"]),
                            float(cfg["evaluation.confidence"]))
    la, lb = labels
    flips = int(ledger["verdict flipped"].sum()) if len(ledger) else 0
    moved = int(aurocs[f"{lb} outside {la}'s interval"].fillna(False).astype(bool).sum()) if len(aurocs) else 0
    text = [f"# {la} ({dir_a}) against {lb} ({dir_b})", "",
            f"## Claims ledger: {len(ledger)} rows, {flips} verdict(s) flipped", "",
            ledger.round(3).to_markdown(index=False) if len(ledger) else "(no ledger rows in either run)", "",
            f"## Estimator AUROC: {len(aurocs)} rows, {moved} outside {la}'s interval", "",
            aurocs.round(3).to_markdown(index=False) if len(aurocs) else "(no per-question scores in both runs)"]
    print("\n".join(text))
    if out:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        ledger.to_csv(out / "ledger.csv", index=False)
        aurocs.to_csv(out / "auroc.csv", index=False)
        with atomic_open(out / "comparison.md") as fh:
            fh.write("\n".join(text) + "\n")
    return ledger, aurocs
