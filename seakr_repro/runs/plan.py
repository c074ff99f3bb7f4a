"""What a profile will run, counted before any of it runs: each data set's size, the question-runs
of each paper table (one method or ablation row on one data set) and each run's questions when
finished, which `status` and partial tables report progress against. `cost` prices these counts,
`disk_needs` sizes them."""
from __future__ import annotations

import ast
import copy
import dataclasses
import json
from dataclasses import dataclass

import pandas as pd

from ..artifacts import (ABLATIONS, EXTRACTION, MECHANISMS, REASONING_ABLATIONS, SEED_STEP, TABLES, methods,
                         seed_methods, table)
from ..core.config import Config
from ..core.errors import UserError
from ..core.paths import NOTEBOOKS_DIR, RESULTS_ROOT   # not results_dir(): reading progress creates nothing


def notebook_parameter(cfg: Config, step: str, name: str):
    """A notebook parameter as `make reproduce` passes it: the profile's `notebooks.<step>`
    entry, else the value in the notebook's own `parameters` cell."""
    given = ((cfg.get("notebooks", {}) or {}).get(step) or {})
    if name in given:
        return given[name]
    nb = json.loads((NOTEBOOKS_DIR / f"{step}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if "parameters" in (cell.get("metadata", {}).get("tags") or []):
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                    return ast.literal_eval(node.value)
    raise KeyError(f"{step} has no parameter {name}")


def with_parameters(cfg: Config, parameters: dict[str, dict] | None) -> Config:
    """`cfg` with reproduce's --param ({notebook: {NAME: value}}) as notebooks.<notebook>.<NAME>,
    so that what a run plans is what the notebooks will be given."""
    if not any((parameters or {}).values()):
        return cfg
    # merged as given: --param checked each name against its notebook's parameters cell already
    # (and a notebook folder of one's own need not be the shipped one the profile checker knows)
    data = copy.deepcopy(cfg.data)
    notebooks = data.get("notebooks") or {}
    for nb, values in parameters.items():
        notebooks[nb] = {**(notebooks.get(nb) or {}), **values}
    data["notebooks"] = notebooks
    return dataclasses.replace(cfg, data=data)


def set_size(cfg, name: str, prepared: dict | None = None) -> int:
    """Questions of one data set in this profile, capped by datasets.n_questions: the paper's count
    for a dev set to download (Table 6), else the bundled set's; with `prepared` (a cache of
    counts), the set step 00 prepared where it is on disk."""
    from ..data.registry import DATASETS, load_dataset

    n = cfg.get("datasets.n_questions")
    spec = DATASETS[name]
    on_disk = _prepared_size(cfg, name, prepared) if prepared is not None else None
    if on_disk is not None:
        total = on_disk                         # a sample or a stand-in: what will run
    elif spec.paper_size is not None and spec.root == "raw":
        total = spec.paper_size                 # a dev set to download: the paper's count
    else:
        total = len(load_dataset(name))         # bundled: count it
    return min(n, total) if n is not None else total


def step_cap(cfg: Config, step: str) -> int | None:
    """Questions per data set a run step asks for (None: all): Tables 3/4's sample, else N_QUESTIONS."""
    sample = next((t.sample for t in TABLES.values() if t.step == step and t.sample), None)
    return cfg.get(sample) if sample else notebook_parameter(cfg, step, "N_QUESTIONS")


def label_method(cfg: Config, label: str) -> str:
    """The method a run label runs: its table row's, SeaKR for a backbone, else the label itself."""
    for spec in TABLES.values():
        for run in spec.runs:
            if run.label == label:
                return run.method
    return "seakr" if label in (cfg.get("backbones.models", []) or []) else label


def work_keys(cfg: Config) -> set[tuple[str, str, str]]:
    """(step, run, data set) of every unit of model work the profile plans (`cost` prices them):
    `question_runs(as_run=True)`, the calibration sets (steps 02 and 07), step 10's SKR labels and
    KBAE's examples, step 11's trials."""
    from .inputs import profile_datasets

    runs = question_runs(cfg, as_run=True)
    keys = set(zip(runs["notebook"], runs["run"], runs["dataset"]))
    keys.add((EXTRACTION, "extraction", "calibration"))
    keys |= {(table("table4").step, f"calibration:{m}", "calibration") for m in cfg.get("backbones.models", []) or []
             if m != cfg["model.name"]}
    datasets = profile_datasets(cfg)
    keys |= {(SEED_STEP, "skr-labels", d) for d in datasets}
    simple = list(cfg["datasets.simple"]) or datasets
    keys.add((SEED_STEP, "kbae-data", simple[0]))
    keys.add((MECHANISMS, "trials", notebook_parameter(cfg, MECHANISMS, "DATASET") or simple[0]))
    return keys


def question_runs(cfg: Config, prepared: bool = False, as_run: bool = False) -> pd.DataFrame:
    """One row per (table, run, data set): notebook, table, run, method, dataset, questions.
    Tables 1-4 and 7 as `artifacts.TABLES` declares them, with the profile's sets and samples
    (`as_run`: as `make reproduce` runs them: Table 7's rows notebook 09's METHODS, and notebook
    10's rows, table "seed"). The sets are the paper's; with `prepared`, the ones step 00 wrote
    where they are on disk."""
    counted, caps, rows = ({} if prepared else None), {}, []
    for step, key, label, method, d in _runs(cfg, as_run):
        if step not in caps:
            caps[step] = step_cap(cfg, step)
        n = set_size(cfg, d, counted)
        rows.append((step, key, label, method, d, n if caps[step] is None else min(int(caps[step]), n)))
    return pd.DataFrame(rows, columns=["notebook", "table", "run", "method", "dataset", "questions"])


def _runs(cfg: Config, as_run: bool = True):
    """(step, table, run label, method, data set) of each run, in notebook order (`question_runs`)."""
    from .inputs import profile_datasets

    for key, spec in TABLES.items():
        runs = ([(m, "seakr") for m in cfg.get("backbones.models", []) or []] if spec.kind == "backbones"
                else [(s.label, s.method) for s in spec.runs])
        if spec.kind == "timing" and as_run:  # notebook 09 times the METHODS of its parameters
            runs = [(m, meth) for m, meth in runs if m in notebook_parameter(cfg, spec.step, "METHODS")]
        yield from ((spec.step, key, label, method, d) for label, method in runs
                    for d in table_datasets(cfg, key) if runs_on(label, d))
    if as_run:
        yield from ((SEED_STEP, "seed", label, label, d) for d in profile_datasets(cfg)
                    for label in ("seakr",) + seed_methods())


def _cap(cfg: Config, label: str, dataset_kind: str) -> int | None:
    """What caps a run label's questions: Tables 3/4's analysis sample, else its notebook's
    N_QUESTIONS (04/05's for their shared base runs, e.g. seakr)."""
    step = table("table1" if dataset_kind == "complex" else "table2").step
    if label not in methods("table1") + methods("table2"):
        if label in ABLATIONS or label in (cfg.get("backbones.models", []) or []):
            return cfg.get("analysis.n_questions")
        step = SEED_STEP if label in seed_methods() else step
    return ((cfg.get("notebooks", {}) or {}).get(step) or {}).get("N_QUESTIONS")


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
    """Questions the run will have when finished: the prepared set, capped (`_cap`); None: not prepared."""
    from ..data.registry import DATASETS

    total = _prepared_size(cfg, dataset, {} if cache is None else cache)
    cap = _cap(cfg, label, DATASETS[dataset].kind if dataset in DATASETS else "complex")
    return min(total, int(cap)) if total is not None and cap is not None else total


def runs_on(label: str, dataset: str) -> bool:
    """False for a self-aware reasoning ablation on simple QA (complex QA only, paper Table 3)."""
    from ..data.registry import DATASETS

    return not (label in REASONING_ABLATIONS and DATASETS[dataset].kind == "simple")


def analysis_datasets(cfg: Config) -> list[str]:
    """The data sets of Tables 3/4 (notebooks 06, 07): `analysis.datasets`, null = the profile's."""
    from .inputs import profile_datasets

    own = profile_datasets(cfg)
    chosen = cfg.get("analysis.datasets") or own
    missing = [d for d in chosen if d not in own]
    if missing:
        raise UserError(f"analysis.datasets names {', '.join(missing)}, which profile "
                        f"'{cfg.profile}' does not prepare", setting="analysis.datasets",
                        fix="add them to datasets.complex / datasets.simple, or remove them")
    return list(chosen)


def table_datasets(cfg: Config, key: str) -> list[str]:
    """The data sets a paper table runs on in this profile (its declaration's `datasets`)."""
    kind = table(key).datasets
    return analysis_datasets(cfg) if kind == "analysis" else list(cfg[f"datasets.{kind}"])


# ------------------------------------------------------------------ the runs a profile plans

# Table 7's timed runs: in its own folder
RUN_FOLDERS = {t.step: f"{t.step}/runs" for t in TABLES.values() if t.kind == "timing"}


@dataclass(frozen=True)
class PlannedRun:
    """A table row (method label) on one data set, by one step; file <folder>/<label>-<hash>.jsonl."""
    step: str
    label: str
    dataset: str

    @property
    def folder(self) -> str:
        return f"{RUN_FOLDERS.get(self.step, 'runs')}/{self.dataset}"


def planned_runs(cfg: Config) -> list[PlannedRun]:
    """Every run the profile plans (`_runs`), by (label, data set): its file is `run_file`'s."""
    return [PlannedRun(step, label, d) for step, _, label, _, d in _runs(cfg)]


def label_files(folder, label: str) -> list:
    """The run files of one label in a data set's folder (every configuration)."""
    return sorted(p for p in folder.glob(f"{label}-*.jsonl") if p.stem.rsplit("-", 1)[0] == label)


def run_file(res, run: PlannedRun):
    """The file of a planned run under the results folder `res`: the one `runner.mark_current`
    recorded (None when that file is gone); with no record, its label's only file, or None."""
    from pathlib import Path

    from .runner import current_name

    folder = Path(res) / run.folder
    name = current_name(folder, run.label)
    if name is not None:
        return folder / name if (folder / name).is_file() else None
    files = label_files(folder, run.label)
    return files[0] if len(files) == 1 else None
