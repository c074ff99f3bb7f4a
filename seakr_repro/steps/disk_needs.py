"""What a profile's steps will need on disk (corpus, index, call cache, step 02's vectors, run
files), by arithmetic from measured per-unit sizes: checked before a grid of runs starts and
shown by preflight."""
from __future__ import annotations

from ..core.disk import require_free_space


# Per-unit sizes, MEASURED (README, "Disk and memory"): per passage on the default corpus (real
# Wikipedia text, 4,810 passages: JSONL 3,384,093 B, Lucene index with -storeContents 2,757,991 B);
# per question per method by `make scale-check` (call cache in its default "gram" form, run file).
JSONL_BYTES_PER_PASSAGE = 704
INDEX_BYTES_PER_PASSAGE = 574
PASSAGES = {"wiki-excerpt": 4_810, "dpr-wiki": 21_015_324}
CACHE_BYTES_PER_QUESTION = {"cot": 1_179, "ircot": 6_137, "self_rag": 17_488, "flare": 11_750,
                            "dragin": 17_582, "seakr": 95_200}
RUN_BYTES_PER_QUESTION = {"cot": 800, "ircot": 5_886, "self_rag": 2_295, "flare": 7_196,
                          "dragin": 8_900, "seakr": 5_642}
FANOUT_SINGLE_VALUE = 1_788       # step 02's calibration questions when N_FANOUT is null (all)


def set_size(cfg, name: str) -> int:
    """Questions of one data set in this profile: the paper's count for a dev set still to
    download (Table 6), the bundled set's own count, capped by datasets.n_questions."""
    from ..data.registry import DATASETS, load_dataset

    n = cfg.get("datasets.n_questions")
    spec = DATASETS[name]
    if spec.paper_size is not None and spec.root == "raw":
        total = spec.paper_size                 # a dev set to download: the paper's count
    else:
        total = len(load_dataset(name))         # bundled: count it
    return min(n, total) if n is not None else total


def estimate_needs(cfg) -> dict[str, int]:
    """Bytes of disk per component for a profile: the corpus JSONL, its index, the LLM call cache,
    step 02's vectors and the run files of Tables 1/2 and the Table 3 ablations. Arithmetic from
    the per-unit sizes above times the profile's counts (model shapes from the model registry)."""
    from ..artifacts import ABLATIONS, methods
    from ..llm.registry import MODELS

    passages = PASSAGES.get(cfg["corpus.name"], 0)
    nb = lambda key: (cfg.get("notebooks", {}) or {}).get(key, {}) or {}   # noqa: E731
    complex_q = sum(set_size(cfg, d) for d in cfg["datasets.complex"])
    simple_q = sum(set_size(cfg, d) for d in cfg["datasets.simple"])
    analysed = cfg.get("analysis.datasets") or [*cfg["datasets.complex"], *cfg["datasets.simple"]]
    n_abl = cfg.get("analysis.n_questions")       # Tables 3/4's sample per data set
    abl_q = sum(set_size(cfg, d) if n_abl is None else min(n_abl, set_size(cfg, d))
                for d in analysed)
    cache = run = 0
    table1, table2 = methods("table1"), methods("table2")
    for m in set(table1) | set(table2):
        n = complex_q * (m in table1) + simple_q * (m in table2)
        cache += n * CACHE_BYTES_PER_QUESTION[m]
        run += n * RUN_BYTES_PER_QUESTION[m]
    cache += abl_q * CACHE_BYTES_PER_QUESTION["seakr"]           # ablations mostly share its calls
    run += abl_q * (len(ABLATIONS) - 1) * RUN_BYTES_PER_QUESTION["seakr"]
    n02 = nb("02-extract-hidden-states")
    fan, bundled = n02.get("N_FANOUT", 60), n02.get("N_BUNDLED", 40)
    n_cal = (FANOUT_SINGLE_VALUE if fan is None else fan) + (bundled or 0)
    spec = MODELS.get(cfg["model.name"])
    layers, hidden = (spec.n_layers, spec.hidden) if spec else (32, 4096)
    # the two-field BM25's corpus keeps the text a second time under its own key (~2x, arithmetic)
    jsonl = JSONL_BYTES_PER_PASSAGE * (2 if cfg.get("retrieval.scheme") == "es_best_fields" else 1)
    return {"corpus_jsonl": passages * jsonl,
            "index": passages * INDEX_BYTES_PER_PASSAGE,
            "call_cache": int(cache),
            "step02_vectors": n_cal * 2 * layers * int(cfg["uncertainty.k"]) * hidden * 2,
            "run_files": int(run)}


def require_for_runs(cfg) -> None:
    """Before a grid of method runs: room for the profile's call cache and run files (the whole
    profile's estimate, so a run that starts is a run that can finish)."""
    from ..core.paths import CACHE_DIR, results_dir

    needs = estimate_needs(cfg)
    require_free_space(CACHE_DIR, needs["call_cache"], "the LLM call cache of this profile's runs")
    require_free_space(results_dir(cfg.profile), needs["run_files"], "this profile's run files")
