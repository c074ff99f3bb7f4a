"""The GPU rehearsal's verdicts (seakr_repro/rehearsal/verdicts.py) on crafted part results: each
part's rule, the statuses the driver adds (skipped, timeout, killed), merging the reports of
several calls, the second call a report asks for, and the plan's arithmetic."""
from __future__ import annotations

import json

import pytest

from seakr_repro.rehearsal import assumptions, plan
from seakr_repro.rehearsal.driver import main
from seakr_repro.rehearsal.verdicts import judge, merge, summary

EXPECT = {"device": "cuda", "methods": ["seakr", "cot"], "paper_sets": ["2wiki", "hotpotqa"],
          "gpu_check_rows": "20,10,5"}
CARD = {"cap": {"cap_gib": 24, "applied": True}, "outside_torch_gib": {"worst": 0.52, "worst_at": "end", "end": 0.52}}


def _ran(**found) -> dict:
    return {"outcome": "returned", "card": CARD, **found}


def _method(n=1, failed=0):
    return {"sets": {"2wiki": {"n": n, "failed": failed}}, "skipped": {}}


def test_methods_are_ok_only_when_every_method_ran_a_question_on_every_set():
    good = _ran(methods={"seakr": _method(), "cot": _method()})
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


def test_oom_is_ok_only_when_the_retry_ran_under_its_cap_and_kept_the_tokens():
    never = _ran(retry_path_ran=False, uncapped_peak_bytes=900,
                 runs=[{"ok": False, "oom_retries": 0, "error": "CUDA out of memory"}] * 2)
    got = judge("oom", never, EXPECT)
    assert got["status"] == "failed" and "never ran" in got["why"][0]
    other = {**never, "runs": [{"ok": True, "oom_retries": 2, "same_tokens": False}]}
    assert "differ" in judge("oom", other, EXPECT)["why"][0]
    over = {**never, "runs": [{"ok": True, "oom_retries": 1, "same_tokens": True, "peak_bytes": 800, "cap_bytes": 700}]}
    assert "under its cap" in judge("oom", over, EXPECT)["why"][0]
    assert judge("oom", {**never, "retry_path_ran": True}, EXPECT)["status"] == "ok"
    no_room = {**never, "why": "passes of k/2 rows peak no lower than the uncapped call"}
    assert judge("oom", no_room, EXPECT)["why"] == [no_room["why"]]


def test_a_missing_package_fails_env_and_a_raising_part_fails():
    env = _ran(versions={"torch": None, "transformers": "5.23.0"}, package_modules_not_importing={},
               cuda_available=False)
    got = judge("env", env, EXPECT)
    assert got["status"] == "failed" and "torch does not import" in got["why"]
    raised = judge("oom", {"outcome": "raised", "error": "ModuleNotFoundError: No module named 'torch'"}, EXPECT)
    assert raised["status"] == "failed" and raised["why"] == ["ModuleNotFoundError: No module named 'torch'"]
    assert judge("env", {"card": CARD}, EXPECT)["status"] == "failed"         # no outcome: not ok


def test_ray_status_is_decided_here_from_what_the_part_found():
    """The ray part sets no status: without Ray it reports the import error and the pack's
    sizes; the verdict says not run where Ray could not travel, failed where the pack carried it."""
    no_pack = judge("ray", _ran(ray_imports=False, import_error="No module named 'ray'", pack="/x/.gpu-rehearsal",
                                pack_sizes=None), EXPECT)
    assert no_pack["status"] == "not run" and "no pack sizes at /x/.gpu-rehearsal/sizes.json" in no_pack["why"][0]
    left = {"ray_carried": False, "why": "Ray left out: rehearsal 25.0 MiB + ray 40.0 MiB = 69.0 MiB"}
    out = judge("ray", _ran(ray_imports=False, import_error="No module named 'ray'", pack_sizes=left), EXPECT)
    assert out["status"] == "not run" and "Ray left out" in out["why"][0]
    carried = {"ray_carried": True, "why": "= 53.0 MiB, within the 64.0 MiB one call carries"}
    broken = judge("ray", _ran(ray_imports=False, import_error="No module named 'jsonschema'", pack_sizes=carried),
                   EXPECT)
    assert broken["status"] == "failed" and "carried Ray" in broken["why"][0] and "jsonschema" in broken["why"][0]
    same = dict(ray_imports=True, same_rows_as_local=True, same_scores_as_local=True, llm_calls=12,
                llm_cache_hits=0, worker={"gpus": ["0"]})
    assert judge("ray", _ran(**same), EXPECT)["status"] == "ok"
    for bad, says in ((dict(same_rows_as_local=False, differing_fields={"q1": ["answer"]}), "rows differ"),
                      (dict(llm_cache_hits=3), "did not compute"), (dict(worker={"gpus": []}), "one GPU")):
        got = judge("ray", _ran(**{**same, **bad}), EXPECT)
        assert got["status"] == "failed" and any(says in w for w in got["why"]), got
    # summary: "not run" alone does not fail the call
    assert summary({"parts": {"ray": no_pack}})["exit_status"] == 0


def test_gpu_tests_count_a_collection_error_and_need_a_pass_on_the_gpu():
    base = _ran(rc=0, tests=2, failures=0, errors=0, skipped=0, passed=2)
    assert judge("gpu_tests", base, EXPECT)["status"] == "ok"
    collection = {**base, "rc": 2, "tests": 3, "errors": 1, "passed": 2}
    assert any("collection error" in w for w in judge("gpu_tests", collection, EXPECT)["why"])
    skipped = {**base, "skipped": 2, "passed": 0}
    assert judge("gpu_tests", skipped, EXPECT)["status"] == "failed"             # on the GPU: proved nothing
    assert judge("gpu_tests", skipped, {**EXPECT, "device": "cpu"})["status"] == "ok"


PAPER_DECODE = {"named": "graph", "calls": {"graph": 41}, "graph_captures": 41, "graph_replays": 3977}


def test_seakr_paper_is_judged_set_by_set_and_every_part_fails_on_memory_outside_torch():
    q = {"seconds": [80.0], "failed": 0}
    ok = _ran(questions={"2wiki": q, "hotpotqa": q}, not_reached={}, decode=PAPER_DECODE)
    got = judge("seakr_paper", ok, EXPECT)
    assert got["status"] == "ok" and got["set_status"] == {"2wiki": "ok", "hotpotqa": "ok"}
    short = _ran(questions={"2wiki": q}, not_reached={"hotpotqa": {"why": "a hotpotqa question needs about 109 s"}},
                 decode=PAPER_DECODE)
    got = judge("seakr_paper", short, EXPECT)
    assert got["status"] == "skipped" and got["set_status"] == {"2wiki": "ok", "hotpotqa": "skipped"}
    assert "109 s" in got["why"][0]
    failed = _ran(questions={"2wiki": q, "hotpotqa": {"seconds": [90.0], "failed": 1}}, not_reached={},
                  decode=PAPER_DECODE)
    assert judge("seakr_paper", failed, EXPECT)["set_status"]["hotpotqa"] == "failed"
    none = _ran(questions={"2wiki": q}, not_reached={}, decode=PAPER_DECODE)   # hotpotqa neither ran nor was skipped
    assert judge("seakr_paper", none, EXPECT)["status"] == "failed"
    jax = {**ok, "card": {**CARD, "outside_torch_gib": {"worst": 59.9, "worst_at": "after seakr", "end": 59.9}}}
    got = judge("seakr_paper", jax, EXPECT)
    assert got["status"] == "failed" and "59.9 GiB of the card in use outside torch" in got["why"][0]


def test_seakr_paper_fails_when_its_decode_calls_ran_elsewhere_than_the_path_it_names():
    q = {"seconds": [80.0], "failed": 0}
    expect = {**EXPECT, "paper_decode": "graph"}

    def why(decode):
        got = judge("seakr_paper", _ran(questions={"2wiki": q, "hotpotqa": q}, not_reached={},
                                        **({"decode": decode} if decode is not None else {})), expect)
        return got["status"], " ".join(got.get("why", []))
    assert why(PAPER_DECODE) == ("ok", "")
    assert why(None) == ("failed", "no record of the decode path that ran (decode)")
    # named graph, ran the default path: the fault this rule exists for
    default = {"named": "one_sync", "calls": {"one_sync": 41}, "graph_captures": 0, "graph_replays": 0}
    status, text = why(default)
    assert status == "failed" and "asked for decode path 'graph'" in text
    status, text = why({**PAPER_DECODE, "calls": {"graph": 40, "one_sync": 1}})
    assert status == "failed" and "other paths" in text
    status, text = why({**PAPER_DECODE, "graph_captures": 0, "graph_replays": 0})
    assert status == "failed" and "did not run as a graph" in text
    status, text = why({**PAPER_DECODE, "calls": {}})
    assert status == "failed" and "no decode call ran" in text


def test_env_fails_a_torch_or_transformers_the_package_has_not_been_tested_with():
    from seakr_repro.rehearsal.tested_with import tested_versions

    def env(**installed):
        pins = {"torch": "2.13.0", "transformers": "5.23.0"}
        versions = {**pins, **installed}
        differ = {m: {"installed": v, "pinned": pins[m]} for m, v in installed.items() if v.split("+")[0] != pins[m]}
        return judge("env", _ran(versions=versions, differ_from_pins=differ, package_modules_not_importing={},
                                 cuda_available=True), EXPECT)
    assert env()["status"] == "ok"
    assert env(torch="2.13.0+cu130")["status"] == "ok"                  # the pin, with its local label
    assert "2.9.0" not in tested_versions()["torch"]
    got = env(torch="2.9.0+cu128")                                     # no row for it
    assert got["status"] == "failed" and "torch 2.9.0+cu128 differs from its pin 2.13.0" in got["why"][0]
    assert "data/measured/tested_versions.csv" in got["why"][0]
    assert env(transformers="9.0.0")["status"] == "failed"
    for package in ("torch", "transformers"):                           # every recorded version passes
        for v in tested_versions()[package]:
            assert env(**{package: v.replace("*", "0")})["status"] == "ok", (package, v)


def test_unfinished_and_skipped_parts():
    partial = {"paths": {"one_sync": {"ms_per_step": 60.0}}}
    t = judge("decode_bench", {"outcome": "timeout", "error": "stopped at its limit of 90 s", "partial": partial},
              EXPECT)
    assert t["status"] == "timeout" and t["partial"] == partial
    assert judge("methods", {"outcome": "crashed", "rc": -9}, EXPECT)["status"] == "crashed"
    k = judge("methods", {"outcome": "running", "error": "the call ended while this part ran"}, EXPECT)
    assert k["status"] == "killed" and k["why"] == ["the call ended while this part ran"]
    s = judge("ray", {"outcome": "skipped", "skipped": plan.skip_record("ray", "llama-2-7b", 60, 12)}, EXPECT)
    assert s["status"] == "skipped" and s["why"] == ["ray needs about 60 s, 12 s of the budget were left"]
    assert summary({"parts": {"ray": s}})["exit_status"] == 2         # incomplete: run next_call
    assert summary({"parts": {"ray": s, "methods": k}})["exit_status"] == 1


GRAPH_ROW = {"ms_per_step": 9.8, "captures_per_call": [1, 1], "replays_per_call": [48, 48], "capture_s": 0.4}
BENCH_OK = dict(ok=True, paths={"one_sync": {"ms_per_step": 60.0}, "graph": GRAPH_ROW},
                checks={"one_sync": {"ok": True}, "graph": {"ok": True}})


def test_decode_bench_is_ok_only_when_every_path_matches_the_reference():
    assert judge("decode_bench", _ran(**BENCH_OK), EXPECT)["status"] == "ok"
    got = judge("decode_bench", _ran(**{**BENCH_OK, "ok": False,
                                        "checks": {"one_sync": {"ok": True}, "graph": {"ok": False}}}), EXPECT)
    assert got["status"] == "failed" and "['graph']" in got["why"][0]
    assert judge("decode_bench", _ran(**{**BENCH_OK, "checks": {}}), EXPECT)["status"] == "failed"


def test_decode_bench_fails_a_raised_timing_its_own_verdict_and_a_graph_path_that_never_captured():
    raised = {**BENCH_OK, "ok": False, "paths": {**BENCH_OK["paths"], "one_sync": {"error": "OutOfMemoryError: x"}}}
    got = judge("decode_bench", _ran(**raised), EXPECT)
    assert got["status"] == "failed" and any("timed run raised" in w and "OutOfMemoryError" in w for w in got["why"])
    own = judge("decode_bench", _ran(**{**BENCH_OK, "ok": False}), EXPECT)
    assert own["status"] == "failed" and own["why"] == ["the benchmark's own verdict is ok = False"]
    eager = {**GRAPH_ROW, "captures_per_call": [0, 0], "replays_per_call": [0, 0]}
    never = judge("decode_bench", _ran(**{**BENCH_OK, "paths": {**BENCH_OK["paths"], "graph": eager}}), EXPECT)
    assert never["status"] == "failed" and "did not run as a graph" in never["why"][0]
    missing = {**BENCH_OK, "paths": {"one_sync": {"ms_per_step": 60.0}}, "checks": {"one_sync": {"ok": True}}}
    assert judge("decode_bench", _ran(**missing), EXPECT)["why"] == ["the graph path was not timed"]
    assert judge("decode_bench", _ran(**missing), {**EXPECT, "device": "cpu"})["status"] == "ok"


# ------------------------------------------------------------------ several calls, one report
def _report(commit="abc", **parts) -> dict:
    return {"commit": commit, "memory_cap_gib": 24, "device": "cuda", "shape": "llama-2-7b", "started": "t",
            "paper_sets": ["2wiki", "hotpotqa"], "parts": parts}


def _write(tmp_path, *reports) -> list[str]:
    files = []
    for i, r in enumerate(reports):
        files.append(str(tmp_path / f"r{i}.json"))
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    return files


def test_a_failed_call_merged_with_an_ok_call_fails(tmp_path):
    ok = {"status": "ok", "card": CARD}
    failed = {"status": "failed", "why": ["oom: every attempt failed, even after its retries"]}
    files = _write(tmp_path, _report(env=ok, oom=failed), _report(env=ok, oom=ok))
    assert main(["--out", str(tmp_path / "all"), "--merge", *files]) == 1
    got = json.loads((tmp_path / "all" / "report.json").read_text())
    assert got["parts"]["env"]["status"] == "ok" and got["parts"]["oom"]["status"] == "failed"
    assert got["parts"]["oom"]["why"] == ["call 0: oom: every attempt failed, even after its retries"]
    assert set(got["parts"]["oom"]["calls"]) == {"0", "1"}               # every call's entry kept
    # either order
    files = _write(tmp_path, _report(oom=ok), _report(oom={"status": "timeout", "why": ["stopped"]}))
    assert main(["--out", str(tmp_path / "all"), "--merge", *files]) == 1


def test_merge_keeps_each_calls_sets_and_a_part_skipped_then_run_is_ok(tmp_path):
    """Call 1 answered 2Wiki and ran out of budget for HotpotQA and ray; call 2 (its next_call)
    ran those: the merged report has both sets, each from its call, and everything ok."""
    ok = {"status": "ok", "card": CARD}
    first = _report(env=ok, ray={"status": "skipped", "why": ["ray needs about 60 s"],
                                 "skipped": {"why": "ray needs about 60 s"}},
                    seakr_paper={"status": "skipped", "set_status": {"2wiki": "ok", "hotpotqa": "skipped"},
                                 "questions": {"2wiki": {"seconds": [88.0]}}})
    assert plan.next_call({**first, "shape": "llama-2-7b"})["REHEARSAL_ARGS"].startswith(
        "--parts ray,seakr_paper --paper-sets hotpotqa --budget ")
    second = _report(ray=ok, seakr_paper={"status": "ok", "set_status": {"hotpotqa": "ok"},
                                          "questions": {"hotpotqa": {"seconds": [91.0]}}})
    files = _write(tmp_path, first, second)
    assert main(["--out", str(tmp_path / "all"), "--merge", *files]) == 0
    got = json.loads((tmp_path / "all" / "report.json").read_text())
    paper = got["parts"]["seakr_paper"]
    assert paper["status"] == "ok" and paper["set_status"] == {"2wiki": "ok", "hotpotqa": "ok"}
    assert paper["set_calls"] == {"2wiki": {"0": "ok"}, "hotpotqa": {"0": "skipped", "1": "ok"}}
    assert paper["calls"]["0"]["questions"]["2wiki"]["seconds"] == [88.0]
    assert paper["calls"]["1"]["questions"]["hotpotqa"]["seconds"] == [91.0]
    assert got["parts"]["ray"]["status"] == "ok" and got["next_call"] is None
    assert got["summary"]["exit_status"] == 0 and len(got["calls"]) == 2
    # only the first call: HotpotQA never reached, and the merged report says how to reach it
    assert main(["--out", str(tmp_path / "one"), "--merge", files[0]]) == 2
    assert "--paper-sets hotpotqa" in json.loads((tmp_path / "one" / "report.json").read_text())["next_call"]["command"]


def test_merge_refuses_two_commits_a_nameless_report_or_two_caps(tmp_path):
    ok = {"status": "ok"}
    for other in (_report("def", env=ok), _report(None, env=ok), {**_report(env=ok), "memory_cap_gib": None}):
        files = _write(tmp_path, _report(env=ok), other)
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "all"), "--merge", *files])


def test_the_report_names_the_packs_commit_where_git_did_not_travel_and_merge_then_checks_it(tmp_path, monkeypatch):
    """No .git on the GPU machine: the commit comes from the pack's commit.json (the commit's
    files by git's blob ids), the files that differ from it are named, and two calls of different
    commits do not merge."""
    import subprocess

    from seakr_repro.rehearsal import driver, pack

    repo = tmp_path / "repo"
    (repo / "a").mkdir(parents=True)
    (repo / "a" / "x.py").write_text("x = 1\n")
    (repo / "b.txt").write_text("b\n")
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=repo,   # noqa: E731
                                    check=True, capture_output=True, text=True).stdout
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD").strip()
    doc = pack.write_commit(tmp_path / "pack", root=repo)
    assert doc["commit"] == head and set(doc["files"]) == {"a/x.py", "b.txt"}
    assert all(pack.blob_id(repo / f) == blob for f, blob in doc["files"].items())    # git's own ids
    monkeypatch.setattr("seakr_repro.core.provenance.git_revision",
                        lambda: {"revision": "unknown", "dirty": False, "changed": []})
    got = driver.call_commit(tmp_path / "pack", root=repo)
    assert got == {"commit": head, "commit_from": "pack commit.json", "changed_from_commit": [], "changed_files": 0}
    (repo / "b.txt").write_text("changed\n")
    (repo / "a" / "x.py").unlink()
    assert driver.call_commit(tmp_path / "pack", root=repo)["changed_from_commit"] == ["a/x.py", "b.txt"]
    assert driver.call_commit(tmp_path / "nothing", root=repo)["commit"] is None
    with pytest.raises(ValueError, match="differ in commit"):
        merge([_report(head, env={"status": "ok"}), _report("0ther", env={"status": "ok"})])


# ------------------------------------------------------------------ the plan
def _fig(cold: float, warm: float) -> dict:
    # wall time stretched by a busy machine; the plan takes the CPU seconds
    return {"cold": {"wall": 3 * cold, "cpu": cold}, "warm": {"wall": 3 * warm, "cpu": warm}}


RECORD = {"seconds": {"start": _fig(4.0, 2.0),
                      "imports": {"TORCH": _fig(9.0, 4.0), "MODEL": _fig(10.0, 5.0), "PIPELINE": _fig(20.0, 8.0)},
                      "every_module": _fig(30.0, 6.0),
                      "compile": {"serial": {"wall": 20.0, "cpu": 8.0}, "parallel": {"wall": 12.0, "cpu": 9.0},
                                  "jobs": 2}}}


def test_the_lent_estimates_take_start_and_imports_from_the_cold_start_record():
    """A known case at COLD_START_FACTOR 1.5 and a 5 s CUDA context: start 1.5 x 2 = 3 s; env's
    imports 1.5 x 4 + 5 = 11 s and its work 2 + 1.5 x 6 = 11 s (every module); methods' imports
    1.5 x 8 + 5 = 17 s; the compile 1.5 x 8 / 4 = 3 s."""
    assert (plan.COLD_START_FACTOR, plan.CUDA_CONTEXT_S, plan.COMPILE_SPEEDUP) == (1.5, 5.0, 4)
    est = plan.lent_estimates(RECORD)
    assert est["env"] == plan.Estimate(start=3.0, imports=11.0, build=0.0, work=11.0)
    assert est["methods"].start == 3.0 and est["methods"].imports == 17.0
    assert est["methods"].build == plan.GPU_WORK["methods"][0] and est["methods"].work == plan.GPU_WORK["methods"][1]
    # gpu_tests imports nothing itself; its pytest process starts, imports torch and opens a context
    assert est["gpu_tests"].imports == 0 and est["gpu_tests"].work == plan.GPU_WORK["gpu_tests"][1] + 3 + 6 + 5
    assert plan.compile_seconds(RECORD) == 3.0
    assert est["seakr_paper"].least(2) == est["seakr_paper"].seconds + 2 * plan.question_room(89.5)


def test_every_call_keeps_its_slack_and_the_calls_fit_the_session_with_the_machines_start():
    """Each prepared call's estimates leave at least 15% of its budget; each fits one command; the
    machine's slow start (2 minutes), the calls, their transfers and the warm wait fit the
    session's 15 minutes; every part of the one call is in exactly one call, in order, and
    seakr_paper's call has room for one question of each set."""
    assert assumptions.MACHINE_START_SECONDS >= 120 and assumptions.DEVICE_SECONDS == 15 * 60
    planned = plan.calls("llama-2-7b")
    assert 1 <= len(planned) <= 2
    assert [p for c in planned for p in c.parts] == list(plan.ONE_CALL)
    est = plan.estimates("llama-2-7b")
    for c in planned:
        assert c.need <= (1 - plan.SLACK_FRACTION) * c.budget and c.slack / c.budget >= 0.15
        assert c.timeout_s <= assumptions.SECONDS_PER_CALL and c.timeout_s >= c.budget
        if "seakr_paper" in c.parts:
            assert set(c.sets) == set(plan.PAPER_SETS)
            assert c.need >= est["seakr_paper"].seconds + 2 * plan.question_room(est["seakr_paper"].per_question)
    assert plan.session_seconds(planned) <= assumptions.DEVICE_SECONDS
    # the tiny shape on this CPU: one call of every part
    (tiny,) = plan.calls("tiny")
    assert tiny.parts == plan.ONE_CALL and tiny.need <= 0.85 * tiny.budget


def test_a_first_calls_report_names_the_prepared_second_call():
    planned = plan.calls("llama-2-7b")
    if len(planned) == 1:
        pytest.skip("the whole plan fits one call")
    first = {"shape": "llama-2-7b", "paper_sets": list(plan.PAPER_SETS), "plan": {"parts": list(planned[0].parts)},
             "parts": {p: {"status": "ok"} for p in planned[0].parts}}
    nxt = plan.next_call(first)
    assert nxt["REHEARSAL_ARGS"].startswith(f"--parts {','.join(planned[1].parts)}")
    assert f"--budget {planned[1].budget}" in nxt["REHEARSAL_ARGS"] and nxt["timeout_s"] == planned[1].timeout_s
    assert plan.next_call({**first, "plan": {"parts": ["env"]}}) is None     # not the plan's first call


def test_the_parts_table_is_the_plans_and_parts_set_no_status():
    import inspect

    from seakr_repro.rehearsal import parts

    assert list(parts.PARTS) == list(plan.PARTS) and set(plan.ONE_CALL) < set(parts.PARTS)
    for name, part in parts.PARTS.items():
        source = inspect.getsource(inspect.getmodule(part.run))
        assert '"status"' not in source and "'status'" not in source, name


def test_the_docs_give_the_plans_calls_and_itemised_plan():
    """docs/measurements.md gives each prepared call's device-tool arguments and the itemised plan
    as `python -m seakr_repro.rehearsal.plan` prints them now (rerun it after the cold-start
    record changes); the Makefile names the first call's timeout_s."""
    from seakr_repro.core.paths import REPO_ROOT

    text = (REPO_ROOT / "docs" / "measurements.md").read_text()
    section = text[text.index("## GPU rehearsal"):]
    planned = plan.calls("llama-2-7b")
    for i, c in enumerate(planned, 1):
        assert json.dumps(plan.device_call(c, first=i == 1)) in section, f"call {i}"
    assert plan.table("llama-2-7b") in section
    make = (REPO_ROOT / "Makefile").read_text()
    line = next(x for x in make.splitlines() if x.startswith("gpu-rehearsal:"))
    assert f"timeout_s {planned[0].timeout_s}" in line and "carry .gpu-rehearsal" in line


def test_skip_records_say_where_the_estimate_comes_from():
    rec = plan.skip_record("methods", "llama-2-7b", 60, 30.4)
    assert rec == {"estimate_s": 60, "left_s": 30, "estimate_from": plan.ESTIMATE_SOURCE["llama-2-7b"],
                   "why": "methods needs about 60 s, 30 s of the budget were left"}
    assert "docs/measurements.md" in rec["estimate_from"]


def test_what_would_not_come_back_from_the_call_is_named(tmp_path):
    from seakr_repro.rehearsal.driver import out_folder_problems

    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "log.txt").write_text("")
    assert out_folder_problems(tmp_path) == []
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "x.json").write_text("{}")
    with open(tmp_path / "big.bin", "wb") as fh:
        fh.truncate((assumptions.FILE_BACK_MIB + 1) * 2**20)
    for i in range(assumptions.FILES_BACK):
        (tmp_path / f"f{i}").write_text("")
    got = out_folder_problems(tmp_path)
    assert any("folders down" in p for p in got) and any("over 16 MiB" in p for p in got)
    assert any("come back" in p for p in got)
