"""`make scale-check`: a paper-scale dry run on a CPU, and the arithmetic to the whole profile.

A synthetic backend of LLaMA-2-7B's shapes and a synthetic corpus, indexed by the real pyserini
path, drive the PAPER profile's own code on a few synthetic questions per data set, with stand-ins
of the official inputs (`doubles.standins`), nothing read from data/raw (docs/disk-and-memory.md,
"Scale check"). Measured: host RSS (each part in its own process), disk and Python overhead per
question, the index build rate; the extrapolation is arithmetic and says so.

BLAS runs on one thread here: U's k x k products are too small to gain from more, and on a loaded
machine idle BLAS threads made a small Gram product hundreds of times slower."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from ..llm.sampling_settings import Sampling

PAPER_PASSAGES = 21_015_324
PAPER_QUESTIONS = {"2wiki": 12_576, "hotpotqa": 7_405, "iirc": 954, "nq": 3_610, "triviaqa": 11_313,
                   "squad": 7_357}                                  # paper Table 6
PAPER_CALIBRATION = 1_788        # FanOutQA single-value sub-questions (step 02 at paper scale)
PAPER_SHAPE = {"layers": 32, "k": 20, "hidden": 4096}
MARGIN_SHARE = 0.25          # of the estimate, free beyond it before the check starts
MARGIN_FLOOR = 64 << 20      # bytes: the least margin, for the Python caches and logs of a tiny run


def written_bytes(passages: int, vector_questions: int, calibration: int) -> int:
    """Bytes the check writes: corpus, index, paper-shaped vectors, step 02's calibration questions."""
    vec_bytes = vector_questions * 2 * PAPER_SHAPE["layers"] * PAPER_SHAPE["k"] * PAPER_SHAPE["hidden"] * 2
    return passages * 2500 + vec_bytes + calibration * 11_000_000


def free_space_margin(estimate: int) -> int:
    """Free bytes beyond `estimate` for what it leaves out (Lucene's merge segments, the call caches,
    the children's scratch files): they grow with the work, so a share of it, above a floor."""
    return max(int(estimate * MARGIN_SHARE), MARGIN_FLOOR)


def free_space_needed(passages: int, vector_questions: int, calibration: int) -> int:
    estimate = written_bytes(passages, vector_questions, calibration)
    return estimate + free_space_margin(estimate)


def _rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _sizes(path: Path, pattern: str = "*") -> list[int]:
    """Bytes of each file under `path` matching `pattern` (none where `path` is not there)."""
    return [f.stat().st_size for f in Path(path).rglob(pattern) if f.is_file()] if Path(path).exists() else []


def _du(path: Path) -> int:
    return sum(_sizes(path))


# ------------------------------------------------------------------------------ corpus + index
def paper_config(overrides: dict | None = None):
    """The paper profile on the synthetic backend (and the caller's overrides)."""
    from ..core.config import load_config

    return load_config("paper", overrides={"model.backend": "synthetic", **(overrides or {})})


def build_synthetic_index(work: Path, passages: int, threads: int = 2) -> dict:
    """The synthetic corpus in the paper profile's corpus layout, indexed with its scheme."""
    from ..data.corpus import STORED_FIELDS, WITH_TEXT_FIELDS, write_corpus
    from ..llm.synthetic import synthetic_passages
    from ..retrieval.index import build_index

    scheme = paper_config()["retrieval.scheme"]
    corpus = work / "corpus.jsonl"
    t0 = time.perf_counter()
    write_corpus(synthetic_passages(passages), corpus, progress=False,
                 fields=WITH_TEXT_FIELDS if scheme == "es_best_fields" else STORED_FIELDS)
    t1 = time.perf_counter()
    info = build_index(corpus, work / "index", backend="pyserini", threads=threads, progress=False,
                       scheme=scheme)
    t2 = time.perf_counter()
    return {"passages": passages, "scheme": scheme, "indexed": info.doc_count,
            "corpus_seconds": round(t1 - t0, 1), "corpus_bytes": corpus.stat().st_size,
            "index_seconds": round(t2 - t1, 1), "index_bytes": _du(work / "index"),
            "index_passages_per_s": round(passages / (t2 - t1), 1)}


# ------------------------------------------------------------------------------ child: methods + step 02
@threadpool_limits.wrap(limits=1)
def _child_runs(work: Path, questions: int, calibration: int, methods: list[str]) -> dict:
    from ..steps import extraction
    from ..doubles.standins import write_standins
    from .. import artifacts
    from ..runs import grid
    from ..data.records import QuestionRecord
    from ..core.io import write_jsonl
    from ..llm import load_backend
    from ..llm.synthetic import synthetic_question
    from ..core.paths import RAW_DIR, results_dir
    from ..retrieval.index import open_searcher

    # the paper profile on the synthetic backend, with its own prompts, passages and searcher
    repo = write_standins(RAW_DIR, questions)
    cfg = paper_config({"prompts.official_repo": str(repo)})
    datasets = list(cfg["datasets.complex"]) + list(cfg["datasets.simple"])
    for name in datasets:              # step 00's prepared files: synthetic questions
        recs = [QuestionRecord.from_dict(synthetic_question(name, i)) for i in range(questions)]
        write_jsonl(results_dir(cfg.profile) / "data" / f"{name}.jsonl", (r.to_dict() for r in recs))
    backend = load_backend(cfg)
    pool = grid.BackendPool(cfg, backend)
    searcher = open_searcher(work / "index", k1=cfg["retrieval.k1"], b=cfg["retrieval.b"],
                             scheme=cfg["retrieval.scheme"])
    cache_dir = Path(os.environ["SEAKR_CACHE_DIR"]) / "llm"
    per_method = {}
    for m in methods:
        spec = artifacts.spec_for(m)
        sets = [d for d in datasets if m in artifacts.methods("table1") and d in cfg["datasets.complex"]
                or m in artifacts.methods("table2") and d in cfg["datasets.simple"]]
        cache_before, files_before = _du(cache_dir), len(_sizes(cache_dir))
        runs_before = sum(_sizes(results_dir(cfg.profile) / "runs", "*.jsonl"))   # not current.json
        t0 = time.perf_counter()
        res, skipped = grid.run_grid(cfg, pool, searcher, [spec], sets, questions, progress=False)
        wall = time.perf_counter() - t0
        n = questions * len(sets)
        f1 = res[res.metric == "f1"] if len(res) else res    # a skipped method has no rows
        per_method[m] = {
            "questions": n, "skipped": skipped, "wall_s_per_q": round(wall / max(n, 1), 4),
            "runner_s_per_q": round(float(f1["seconds_per_q"].mean()), 4) if len(f1) else None,
            "llm_calls_per_q": round(float(f1["llm_calls_per_q"].mean()), 2) if len(f1) else None,
            "retrievals_per_q": round(float(f1["retrievals_per_q"].mean()), 2) if len(f1) else None,
            "cache_bytes_per_q": round((_du(cache_dir) - cache_before) / max(n, 1)),
            "cache_files_per_q": round((len(_sizes(cache_dir)) - files_before) / max(n, 1), 2),
            "run_file_bytes_per_q": round((sum(_sizes(results_dir(cfg.profile) / "runs", "*.jsonl")) - runs_before)
                                          / max(n, 1)),
        }
    rss_methods = _rss_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        cache_forms = measure_cache_forms(backend, [f"Question {i}: who?" for i in range(5)], Path(tmp),
                                          Sampling(k=20, max_new_tokens=100))
    records = [QuestionRecord.from_dict({**synthetic_question("calibration", i), "source": "fanoutqa-sub"})
               for i in range(calibration)]
    t0 = time.perf_counter()
    out = extraction.run_extraction(backend, records, cfg, n_shot=4, progress=False)
    wall = time.perf_counter() - t0
    paths = {"scheme": cfg["retrieval.scheme"], "demos": cfg["prompts.demos"],
             "simple_qa_passages": cfg["seakr.simple_qa_passages"], "questions": "synthetic"}
    return {"paper_paths": paths, "methods": per_method, "rss_methods_bytes": rss_methods,
            "cache_forms_paper_shape": cache_forms,
            "step02": {"questions": calibration, "wall_s_per_q": round(wall / max(calibration, 1), 3),
                       "vector_bytes_per_q": round(_du(out / "vectors") / max(calibration, 1)),
                       "row_bytes_per_q": round((out / "questions.jsonl").stat().st_size / max(calibration, 1))},
            "rss_after_step02_bytes": _rss_bytes()}


# ------------------------------------------------------------------------------ step 03 at the paper's shape
def write_synthetic_store(out: Path, n: int, seed: int = 0) -> list[dict]:
    """n questions of paper-shaped float16 vectors, written as step 02 writes them."""
    from ..steps.extraction import HOOKS, write_vectors

    rng = np.random.default_rng(seed)
    L, k, d = PAPER_SHAPE["layers"], PAPER_SHAPE["k"], PAPER_SHAPE["hidden"]
    rows = []
    for q in range(n):
        spread = np.float32(0.5 if q % 2 else 0.01)
        base = rng.standard_normal((L, 1, d), dtype=np.float32)
        write_vectors(out, f"q{q}", {h: base + spread * rng.standard_normal((L, k, d), dtype=np.float32)
                                     for h in HOOKS})
        nonempty = [True] * (k - 1) + [q % 3 > 0]
        rows.append({"id": f"q{q}", "correct": bool(q % 2 == 0), "nonempty": nonempty,
                     "greedy_stats": {"logprobs": [-0.3, -0.2], "official_logprobs": [-0.3],
                                      "logsumexp": [20.0, 21.0]},
                     "sample_stats": [{"nonempty": ok, "logprobs": [-1.0, -0.5],
                                       "official_logprobs": [-1.0]} for ok in nonempty],
                     "prompt_uncertainty": 0.5})
    return rows


@threadpool_limits.wrap(limits=1)
def _child_step03(out: Path, n_boot: int = 1000) -> dict:
    """What notebook 03 does with the vectors (estimator table, Figure 3 k and layer), RSS."""
    from .. import uncertainty as unc
    from ..steps.extraction import VectorStore
    from ..steps.estimators import estimator_scores
    from ..llm.model_info import middle_layer

    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    t0 = time.perf_counter()
    store = VectorStore(out, rows)
    incorrect = np.array([not r["correct"] for r in rows], dtype=int)
    layer = middle_layer(store.n_layers)
    scores = estimator_scores(rows, store.layer("mlp_out", layer), {"alpha": 1e-3, "variant": "seakr"})
    unc.estimator_aurocs(scores, incorrect, n_boot=n_boot, seed=0)
    del scores
    mid = store.nonempty("mlp_out", layer)
    unc.quality_vs_k(mid, incorrect, [2, 4, 8, 12, 16, 20], n_boot=n_boot)
    del mid
    unc.quality_vs_layer(store.by_layer("mlp_out"), incorrect, n_boot=n_boot)
    return {"questions": len(rows), "seconds": round(time.perf_counter() - t0, 1), "rss_bytes": _rss_bytes()}


def _spawn(args: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "seakr_repro", "bench", "scale-check", *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"scale-check child {args[:2]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ cache forms on one call
def format1_bytes(value) -> int:
    """What CACHE_FORMAT 1 wrote for a sample call: a float32 .npy plus the JSON of the samples."""
    import dataclasses
    import io as _io

    buf = _io.BytesIO()
    np.save(buf, np.asarray(value.vectors, dtype=np.float32), allow_pickle=False)
    meta = {"type": "sampleset", "layer": value.layer, "hook": value.hook,
            "samples": [dataclasses.asdict(g) for g in value.samples]}
    return buf.tell() + len((json.dumps(meta, ensure_ascii=False) + "\n").encode("utf-8"))


def measure_cache_forms(backend, prompts, work: Path, settings) -> dict:
    """Per sample call: bytes in format 1 and in each form of format 2, and U's largest change
    (both variants) when read back from each form instead of the float32 vectors."""
    from ..llm.cache import VECTOR_FORMS, LLMCache
    from ..uncertainty import u_from_sampleset

    out = {"calls": len(prompts), "format1_bytes": 0,
           **{f"{f}_bytes": 0 for f in VECTOR_FORMS}, **{f"{f}_max_abs_dU": 0.0 for f in VECTOR_FORMS}}
    for i, prompt in enumerate(prompts):
        value = backend.sample(prompt, settings)
        out["format1_bytes"] += format1_bytes(value)
        for form in VECTOR_FORMS:
            cache = LLMCache(work / form, vectors=form)
            key = f"{i:064x}"
            cache.put(key, value)
            out[f"{form}_bytes"] += cache.path(key).stat().st_size
            back = cache.get(key)
            for variant in ("seakr", "inside"):
                d = abs(u_from_sampleset(back, variant=variant) - u_from_sampleset(value, variant=variant))
                out[f"{form}_max_abs_dU"] = max(out[f"{form}_max_abs_dU"], d)
    for key in ("format1_bytes", *(f"{f}_bytes" for f in VECTOR_FORMS)):
        out[key] = round(out[key] / len(prompts))
    for form in VECTOR_FORMS:
        out[f"{form}_ratio"] = round(out[f"{form}_bytes"] / out["format1_bytes"], 4)
    return out


def _cache_report(model: str, n: int, k: int, max_tokens: int) -> dict:
    """measure_cache_forms on a real model's SeaKR-style closed-book sample calls."""
    from ..core.config import load_config
    from ..data.registry import load_dataset
    from ..llm import load_backend
    from ..prompts import demos_for
    from ..prompts.seakr import build_prompt, simple_qa_stops

    cfg = load_config("default", overrides={"model.name": model})
    backend = load_backend(cfg, cache=False)
    prompts = [build_prompt(demos_for("bundled-single", 4), r.question)
               for r in load_dataset("bundled-single", n=n, seed=0)]
    with tempfile.TemporaryDirectory() as tmp:
        got = measure_cache_forms(backend, prompts, Path(tmp),
                                  Sampling(k=k, max_new_tokens=max_tokens, stop=simple_qa_stops(), seed=42))
    return {"model": model, "hidden": backend.hidden_size, "k": k, "max_new_tokens": max_tokens, **got}


# ------------------------------------------------------------------------------ the report
def extrapolate(m: dict) -> dict:
    """The whole paper profile from the measurements: ARITHMETIC, not a measurement."""
    gib = 1024 ** 3
    from ..runs.disk_needs import INDEX_BYTES_PER_PASSAGE, JSONL_BYTES_PER_PASSAGE

    idx, runs, s03 = m["index"], m["runs"], m["step03"]
    scheme = idx.get("scheme", "es_best_fields")
    n_complex = sum(PAPER_QUESTIONS[d] for d in ("2wiki", "hotpotqa", "iirc"))
    n_simple = sum(PAPER_QUESTIONS[d] for d in ("nq", "triviaqa", "squad"))
    from ..artifacts import methods
    hours, cache_b, run_b = {}, 0.0, 0.0
    for name, v in runs["methods"].items():
        n = n_complex * (name in methods("table1")) + n_simple * (name in methods("table2"))
        hours[name] = round(n * v["wall_s_per_q"] / 3600, 2)
        cache_b += n * v["cache_bytes_per_q"]
        run_b += n * v["run_file_bytes_per_q"]
    (n1, r1), (n2, r2) = [(x["questions"], x["rss_bytes"]) for x in s03["sizes"]]
    slope = (r2 - r1) / (n2 - n1)
    return {
        "note": "arithmetic from the measurements above (per-unit figures x the paper's counts)",
        "index_build_hours": round(PAPER_PASSAGES / idx["index_passages_per_s"] / 3600, 2),
        # disk_needs' real-text sizes (what docs/disk-and-memory.md's table and preflight use) ...
        "corpus_jsonl_gib": round(PAPER_PASSAGES * JSONL_BYTES_PER_PASSAGE[scheme] / gib, 1),
        "index_gib": round(PAPER_PASSAGES * INDEX_BYTES_PER_PASSAGE[scheme] / gib, 1),
        # ... and the synthetic corpus's own, measured here in the same layout, as a check
        "synthetic_corpus_bytes_per_passage": round(idx["corpus_bytes"] / idx["passages"]),
        "synthetic_index_bytes_per_passage": round(idx["index_bytes"] / idx["passages"]),
        "python_overhead_hours_per_method": hours,
        "python_overhead_hours_total": round(sum(hours.values()), 1),
        "call_cache_gib": round(cache_b / gib, 2),
        "run_files_gib": round(run_b / gib, 2),
        "step02_vectors_gib": round(PAPER_CALIBRATION * runs["step02"]["vector_bytes_per_q"] / gib, 1),
        "step03_rss_gib_at_1788": round((r2 + slope * (PAPER_CALIBRATION - n2)) / gib, 2),
        "step03_rss_bytes_per_question": round(slope),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m seakr_repro bench scale-check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--passages", type=int, default=1_000_000, help="synthetic corpus size")
    p.add_argument("--questions", type=int, default=3, help="questions per data set and method")
    p.add_argument("--calibration", type=int, default=10, help="step-02 questions (synthetic)")
    p.add_argument("--vector-questions", type=int, default=100,
                   help="questions of the paper-shaped step-03 store (10.5 MB each on disk)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples in step 03 (notebook 03's)")
    p.add_argument("--methods", nargs="+", default=None, help="default: every Table 1/2 method")
    p.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory, deleted")
    p.add_argument("--out", type=Path, default=Path("results/scale-check.json"))
    p.add_argument("--cache-model", default=None,
                   help="only measure the call cache's forms on this real model's sample calls")
    p.add_argument("--child", choices=("runs", "step03"), help=argparse.SUPPRESS)
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    if a.cache_model:      # the model decodes on every core; only U's tiny products are serial
        print(json.dumps(_cache_report(a.cache_model, a.questions, 20, 100), indent=1))
        return 0
    if a.child:
        print(json.dumps(_child_runs(a.workdir, a.questions, a.calibration, a.methods) if a.child == "runs"
                         else _child_step03(a.workdir, a.n_boot)))
        return 0

    import shutil
    from ..core.disk import require_free_space
    from ..artifacts import methods as table_methods

    methods = a.methods or list(table_methods("table1"))
    work = a.workdir or Path(tempfile.mkdtemp(prefix="seakr-scale-check-"))
    work.mkdir(parents=True, exist_ok=True)
    require_free_space(work, free_space_needed(a.passages, a.vector_questions, a.calibration),
                       f"the scale check ({a.passages:,} passages, {a.vector_questions} paper-shaped vector questions)")
    try:
        m: dict = {"passages": a.passages, "cpu_cores": os.cpu_count()}
        print(f"[scale-check] synthetic corpus of {a.passages:,} passages + Lucene index ...", flush=True)
        saved = work / "index-measurements.json"      # a kept --workdir reuses its index
        scheme = paper_config()["retrieval.scheme"]
        if saved.is_file() and (json.loads(saved.read_text())["passages"],
                                json.loads(saved.read_text()).get("scheme")) == (a.passages, scheme):
            m["index"] = json.loads(saved.read_text())
        else:
            m["index"] = build_synthetic_index(work, a.passages)
            saved.write_text(json.dumps(m["index"]))
        for stale in ("results", "cache", "raw", *(x.name for x in work.glob("store-*"))):
            shutil.rmtree(work / stale, ignore_errors=True)   # disk is measured from empty
        print(f"[scale-check] {json.dumps(m['index'])}", flush=True)
        print(f"[scale-check] paper profile, synthetic backend: {', '.join(methods)}, step 02 ...", flush=True)
        env = {"SEAKR_RESULTS_DIR": str(work / "results"), "SEAKR_CACHE_DIR": str(work / "cache"),
               "SEAKR_RAW_DIR": str(work / "raw")}          # the stand-ins, never data/raw
        m["runs"] = _spawn(["--child", "runs", "--workdir", str(work), "--questions", str(a.questions),
                            "--calibration", str(a.calibration), "--methods", *methods], env)
        print("[scale-check] step 03 over paper-shaped vectors ...", flush=True)
        sizes = []
        for n in (max(a.vector_questions // 2, 1), a.vector_questions):
            store = work / f"store-{n}"
            rows = write_synthetic_store(store, n)
            (store / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            sizes.append(_spawn(["--child", "step03", "--workdir", str(store), "--n-boot", str(a.n_boot)]))
            shutil.rmtree(store)
        m["step03"] = {"shape": PAPER_SHAPE, "sizes": sizes}
        m["extrapolation"] = extrapolate(m)
    finally:
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(m, indent=1) + "\n")
    _print_report(m)
    print(f"[scale-check] measurements written to {a.out}")
    return 0


def _print_report(m: dict) -> None:
    from ..core.disk import human_bytes

    idx, runs, ex = m["index"], m["runs"], m["extrapolation"]
    print(f"\nMEASURED on {m['cpu_cores']} cores, synthetic LLaMA-2-7B-shaped backend, the paper "
          f"profile's paths: {json.dumps(runs['paper_paths'])}")
    print(f"  index build ({idx['scheme']}): {idx['passages']:,} passages in {idx['index_seconds']} s = "
          f"{idx['index_passages_per_s']:,.0f} passages/s; index {human_bytes(idx['index_bytes'])}, "
          f"corpus JSONL {human_bytes(idx['corpus_bytes'])}")
    for name, v in runs["methods"].items():
        print(f"  {name:9s} {v['wall_s_per_q']:.3f} s/question of Python overhead, "
              f"{v['llm_calls_per_q']} LLM calls, cache {human_bytes(v['cache_bytes_per_q'])} "
              f"({v['cache_files_per_q']} files), run file {human_bytes(v['run_file_bytes_per_q'])} per question")
    s2 = runs["step02"]
    print(f"  step 02: {s2['wall_s_per_q']} s/question, vectors {human_bytes(s2['vector_bytes_per_q'])} per question; "
          f"peak RSS methods {human_bytes(runs['rss_methods_bytes'])}, with step 02 "
          f"{human_bytes(runs['rss_after_step02_bytes'])}")
    for s in m["step03"]["sizes"]:
        print(f"  step 03 ({s['questions']} questions x 2 hooks x 32 layers x 20 x 4,096): peak RSS "
              f"{human_bytes(s['rss_bytes'])} in {s['seconds']} s")
    print(f"\nARITHMETIC for the whole paper profile ({PAPER_PASSAGES:,} passages, "
          f"{sum(PAPER_QUESTIONS.values()):,} questions):")
    for k, v in ex.items():
        print(f"  {k}: {v}")

