"""What a profile's steps will need on disk (`PARTS`), by arithmetic from measured per-unit sizes:
checked before a grid of runs starts and shown by preflight."""
from __future__ import annotations

import contextlib
from pathlib import Path

from ..core.disk import require_free_space


# Per-unit sizes, MEASURED (docs/disk-and-memory.md has the files' sizes): per passage on the default
# corpus's 4,810 real passages in each retrieval scheme's layout (es_best_fields keeps `text` beside
# `contents` and indexes title and text apart); per question, each method's (artifacts.METHODS).
JSONL_BYTES_PER_PASSAGE = {"single_field": 704, "es_best_fields": 1_348}
INDEX_BYTES_PER_PASSAGE = {"single_field": 574, "es_best_fields": 771}
PASSAGES = {"wiki-excerpt": 4_810, "dpr-wiki": 21_015_324}
FANOUT_SINGLE_VALUE = 1_788       # step 02's calibration questions when N_FANOUT is null (all)
_SAMPLE_BYTES = 1 << 20           # lines read to measure a passage file's bytes per line


def lines_in(path: Path) -> int:
    """A passage file's lines: counted when the file is under 1 MiB, else its size over the mean
    line length of its first MiB (a 13 GB TSV in a moment, to within a few per cent)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(_SAMPLE_BYTES)
    if size <= _SAMPLE_BYTES:
        return head.count(b"\n") + (1 if head and not head.endswith(b"\n") else 0)
    whole = head[:head.rfind(b"\n") + 1]
    return round(size * whole.count(b"\n") / max(len(whole), 1))


def corpus_passages(cfg) -> int:
    """Passages of the profile's corpus: of the corpus JSONL or DPR's TSV when on disk (a stand-in
    or partial TSV is measured, not taken for the 21M of the real one), else the known count."""
    from ..core.paths import setting_path
    from .inputs import corpus_path

    corpus = corpus_path(cfg)
    if corpus.is_file():
        return lines_in(corpus)
    if cfg["corpus.name"] == "dpr-wiki":
        tsv = setting_path(cfg["corpus.tsv_path"])     # data/raw/... follows SEAKR_RAW_DIR
        if tsv.is_file():
            return max(lines_in(tsv) - 1, 0)     # its header line
    return PASSAGES.get(cfg["corpus.name"], 0)


def model_shape(cfg) -> tuple[int, int]:
    """(layers, hidden size) of the profile's model: its given directory's config.json (a stand-in
    is measured, not taken for the registry's shape), else the registry's, else LLaMA-2-7B's."""
    import json

    from ..llm.registry import MODELS, given_dir

    given = given_dir(cfg["model.name"], cfg)[0]          # where the loader will read it
    if given:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
            raw = json.loads((Path(given).expanduser() / "config.json").read_text(encoding="utf-8"))
            raw = raw.get("text_config") or raw        # multimodal configs nest the language model
            return int(raw["num_hidden_layers"]), int(raw["hidden_size"])
    spec = MODELS.get(cfg["model.name"])
    return (spec.n_layers, spec.hidden) if spec else (32, 4096)


def estimate_needs(cfg) -> dict[str, int]:
    """Bytes of disk per component (`PARTS`) for a profile: the per-unit sizes above times the
    corpus's passages (`corpus_passages`), each run's questions (`plan.question_runs`, prepared
    sets where on disk) and the model's shape (`model_shape`)."""
    from ..artifacts import EXTRACTION, METHODS
    from .plan import question_runs

    runs = question_runs(cfg, prepared=True)
    cache = run = 0
    for table, method, n in zip(runs["table"], runs["method"], runs["questions"]):
        run += n * METHODS[method].run_bytes
        if table != "table3":
            cache += n * METHODS[method].cache_bytes
    # the ablations (Table 3) share most of their calls: one SeaKR run's worth per data set
    ablated = runs[runs["table"] == "table3"].groupby("dataset")["questions"].max()
    cache += int(ablated.sum()) * METHODS["seakr"].cache_bytes
    n02 = (cfg.get("notebooks", {}) or {}).get(EXTRACTION, {}) or {}
    fan, bundled = n02.get("N_FANOUT", 60), n02.get("N_BUNDLED", 40)
    n_cal = (FANOUT_SINGLE_VALUE if fan is None else fan) + (bundled or 0)
    layers, hidden = model_shape(cfg)
    scheme = cfg.get("retrieval.scheme") or "single_field"
    passages = corpus_passages(cfg)
    return {"corpus_jsonl": passages * JSONL_BYTES_PER_PASSAGE[scheme],
            "index": passages * INDEX_BYTES_PER_PASSAGE[scheme],
            "call_cache": int(cache),
            "step02_vectors": n_cal * 2 * layers * int(cfg["uncertainty.k"]) * hidden * 2,
            "run_files": int(run)}


PARTS = {"corpus_jsonl": "corpus JSONL", "index": "BM25 index", "call_cache": "LLM call cache",
         "step02_vectors": "step 02's vectors", "run_files": "run files"}     # as a sentence names them


def needs_left(cfg) -> dict[str, int]:
    """`estimate_needs` less the parts already built (corpus JSONL, index): preflight's estimate, and
    what the disk-full paragraph says the rest of the run needs."""
    from ..retrieval.index import index_dir_for, read_meta
    from ..core.errors import UserError
    from .inputs import corpus_path

    needs = estimate_needs(cfg)
    if corpus_path(cfg).is_file():
        needs.pop("corpus_jsonl")
    with contextlib.suppress(UserError):
        read_meta(index_dir_for(cfg["corpus.name"], cfg["retrieval.backend"], cfg["retrieval.scheme"]))
        needs.pop("index")
    return needs


def needs_by_place(cfg) -> list[tuple[str, int, Path]]:
    """`needs_left` as (what, bytes, the folder it is written to), for the disk-full paragraph."""
    from ..core import paths
    from ..retrieval.index import index_dir_for
    from .inputs import corpus_path

    results = paths.RESULTS_ROOT / cfg.profile
    where = {"corpus_jsonl": corpus_path(cfg).parent,
             "index": index_dir_for(cfg["corpus.name"], cfg["retrieval.backend"], cfg["retrieval.scheme"]),
             "call_cache": paths.CACHE_DIR / "llm", "step02_vectors": results, "run_files": results / "runs"}
    return [(PARTS[part], n, where[part]) for part, n in needs_left(cfg).items()]


def require_for_runs(cfg) -> None:
    """Room for the whole profile's call cache and run files, so a grid that starts can finish."""
    from ..core.paths import CACHE_DIR, results_dir

    needs = estimate_needs(cfg)
    require_free_space(CACHE_DIR, needs["call_cache"], "the LLM call cache of this profile's runs")
    require_free_space(results_dir(cfg.profile), needs["run_files"], "this profile's run files")
