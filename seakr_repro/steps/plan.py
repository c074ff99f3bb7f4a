"""How many questions each run will have when finished: the prepared set (step 00) capped by the
notebook's N_QUESTIONS. The status command and partial tables report progress against it."""
from __future__ import annotations

from ..core.config import Config
from ..core.paths import RESULTS_ROOT     # not results_dir(): reading progress creates nothing


# Which notebook's N_QUESTIONS caps a run label (the total of a run is the prepared set, capped)
def _step_of(cfg: Config, label: str) -> str | None:
    from ..artifacts import ABLATIONS, methods
    from .seed_methods import SEED_METHODS

    if label in methods("table1") or label in methods("table2"):
        return None                       # 04/05: the shared base runs, e.g. seakr, run whole sets
    if label in ABLATIONS:
        return "06-ablations"
    if label in (cfg.get("backbones.models", []) or []):
        return "07-backbones"
    if label in SEED_METHODS:
        return "10-seed-methods"
    return None


def _cap(cfg: Config, label: str, dataset_kind: str) -> int | None:
    notebooks = cfg.get("notebooks", {}) or {}
    step = _step_of(cfg, label)
    if step in ("06-ablations", "07-backbones"):   # Tables 3/4 run on the analysis sample
        return cfg.get("analysis.n_questions")
    if step is not None:
        return (notebooks.get(step) or {}).get("N_QUESTIONS")
    step = "04-complex-qa" if dataset_kind == "complex" else "05-simple-qa"
    return (notebooks.get(step) or {}).get("N_QUESTIONS")


def _prepared_size(cfg: Config, dataset: str, cache: dict) -> int | None:
    if dataset not in cache:
        path = (RESULTS_ROOT / cfg.profile) / "data" / f"{dataset}.jsonl"
        if not path.is_file():
            cache[dataset] = None
        else:                             # count lines: no need to parse 12k questions
            with open(path, "rb") as fh:
                cache[dataset] = sum(1 for line in fh if line.strip())
    return cache[dataset]


def run_total(cfg: Config, dataset: str, label: str, cache: dict | None = None) -> int | None:
    """Questions the run of `label` on `dataset` will have when finished: the prepared set
    (step 00), capped by its notebook's N_QUESTIONS; None when the set is not prepared."""
    from ..data.registry import DATASETS

    total = _prepared_size(cfg, dataset, {} if cache is None else cache)
    cap = _cap(cfg, label, DATASETS[dataset].kind if dataset in DATASETS else "complex")
    return min(total, int(cap)) if total is not None and cap is not None else total
