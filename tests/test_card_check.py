"""The card check (`check-card`, seakr_repro/card_check/): its time plan and margins, the
out-of-memory part's caps, the paragraph on a crafted report, and the check itself on a CPU over
the simulated card (tiny shape here; at LLaMA-2-7B's layers and vocabulary in make test-heavy)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from seakr_repro.card_check import plan
from seakr_repro.card_check.check import paragraph
from seakr_repro.card_check.parts import cap_schedule
from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.price.paces import MEASURED_PACE, measured_paces

GiB, MiB = 2**30, 2**20


@pytest.mark.parametrize("gap", [512 * MiB, 64 * MiB, 3 * GiB])
def test_every_cap_lies_below_the_uncapped_peak_and_above_the_half_width_one(gap):
    """At 7B the uncapped call peaks about 0.5 GiB over k/2 rows per pass: a cap of the floor,
    256 MiB and 0.6 of the gap lay above the uncapped peak, so the uncapped call fitted it."""
    floor = 14 * GiB
    for cap in cap_schedule(floor, floor + gap):
        assert floor < cap < floor + gap


def test_seakr_fits_the_limit_with_a_quarter_to_spare_and_comes_first():
    assert plan.PARTS[0] == "seakr"
    assert plan.estimate("seakr") <= (1 - plan.SPARE) * plan.LIMIT_S
    assert plan.LIMIT_S <= 300


def test_the_one_gpu_call_is_planned_within_420_s_with_the_check_first():
    assert plan.call_seconds() <= plan.CALL_MAX_S == 420
    steps = list(plan.CALL)
    assert steps.index("check_card") < steps.index("pytest_gpu") and plan.CALL["check_card"] == plan.LIMIT_S


def test_a_later_part_starts_only_with_ten_seconds_of_margin():
    assert plan.may_start(40.0, 250.0, 300.0)[0]                  # 10 s left beyond its estimate
    ok, why = plan.may_start(40.0, 250.2, 300.0)                 # 9.8 s: not started, and said why
    assert not ok and "10 s of margin" in why and "50 s of the 300 s limit" in why
    assert plan.may_start(None, 289.0, 300.0)[0] and not plan.may_start(None, 290.5, 300.0)[0]
    assert plan.may_start(1e9, 1e9, None)[0]                      # no limit: everything runs


def test_the_margin_before_every_part_at_the_plans_estimates():
    """The check at the plan's estimates, each part taking its estimate: every part that starts
    has at least MARGIN_S left beyond its estimate; one that does not is named with why."""
    used, ran = 0.0, []
    for part in plan.PARTS:
        need = plan.estimate(part)
        ok, why = plan.may_start(None if part == "seakr" else need, used, plan.LIMIT_S)
        if ok:
            assert part == "seakr" or plan.LIMIT_S - used - need >= plan.MARGIN_S
            used += need
            ran.append(part)
        else:
            assert plan.LIMIT_S - used - need < plan.MARGIN_S and "margin" in why
    assert ran[0] == "seakr" and used <= plan.LIMIT_S


def test_the_paragraph_says_peaks_against_the_cap_paces_price_and_what_did_not_run():
    report = {"card": "NVIDIA H100 80GB HBM3", "seconds": 281.0, "not_run": {"oom": "needs about 40 s"}, "parts": {
        "seakr": {"dtype": "float16", "decode_path": "graph", "peak_bytes": int(17.6 * GiB),
                  "predicted_7b": {"peak_bytes": int(17.56 * GiB)}, "settings": {"uncertainty.k": 20},
                  "path_checks": {"graph": {"ok": True}},
                  "questions": {"2wiki": {"seconds": 30.0, "llm_calls": 41, "failed": False},
                                "hotpotqa": {"seconds": 40.0, "llm_calls": 45, "failed": False}}},
        "methods": {"dataset": "2wiki", "methods": {
            "cot": {"dtype": "float32", "peak_bytes": int(30.8 * GiB), "seconds": 1.0, "llm_calls": 1},
            "flare": {"error": "OutOfMemoryError: CUDA out of memory"}}},
        "decode": {"floor_ms": 4.0, "paths": {"graph": {"ms_per_step": 9.0, "x_floor": 2.25},
                                              "python": {"error": "boom"}}}}}
    text = paragraph(report, {"profile": "paper", "device": "cuda", "shape": "llama-2-7b", "memory_cap_gib": 24.0})
    assert "\n" not in text and "24 GiB cap" in text
    assert "seakr (float16) peaks at 17.60 GiB here" in text and "within the cap" in text
    assert "cot (float32) peaks at 30.80 GiB here: OVER the cap" in text and "flare failed" in text
    assert "30.0 s for its 2wiki question" in text and "on the graph decode path" in text
    assert "graph 9.0 (2.2 x the floor), python failed" in text
    assert "hours" in text and "dragin" in text             # priced; the methods not measured named
    assert "Did not run or failed: oom (needs about 40 s)" in text


def _check_card(tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "seakr_repro", "check-card", "--device", "cpu", "--out", str(out),
                           "--paces", str(tmp_path / "paces.csv"), "--passages", "300", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "report.json").read_text()), proc.stdout


def test_the_check_on_a_cpu_runs_every_part_and_writes_its_paces_elsewhere(tmp_path):
    committed = MEASURED_PACE.read_bytes()
    rep, said = _check_card(tmp_path, "--shape", "tiny", "--profile", "paper-tiny")
    assert list(rep["parts"]) == list(plan.PARTS) and rep["not_run"] == {}
    assert not any("error" in p for p in rep["parts"].values()), json.dumps(rep["parts"])[:3000]
    seakr = rep["parts"]["seakr"]
    assert seakr["decode_path"] == "graph" and seakr["path_checks"]["graph"]["ok"]     # simulated graph
    assert set(seakr["questions"]) == set(plan.PAPER_SETS)
    # at the tiny shape 20 rows hold a few MiB, inside one of the allocator's 20 MiB segments: no cap
    # fails k rows and fits k/2, and the part says so with its numbers (the narrow shape retries)
    oom = rep["parts"]["oom"]
    assert oom["half_rows_peak_bytes"] >= oom["uncapped_allocated_bytes"] and not oom["runs"], oom
    assert "segments swallow the rows" in oom["why"] and oom["why"] in rep["paragraph"]
    assert set(rep["parts"]["decode"]["paths"]) >= {"python", "static", "graph"}
    assert rep["paragraph"] in said and "Every part ran." in rep["paragraph"]
    paces = measured_paces("paper-tiny", tmp_path / "paces.csv")     # a decode path is a pace of its own
    assert set(paces["cpu, simulated card, graph"]["pace"]) >= {("seakr", "2wiki"), ("seakr", "hotpotqa")}
    assert ("cot", "2wiki") in paces["cpu, simulated card"]["pace"]
    assert MEASURED_PACE.read_bytes() == committed


def test_a_check_stopped_at_its_limit_keeps_what_it_measured_and_names_the_rest(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "seakr_repro", "check-card", "--device", "cpu", "--shape", "tiny",
                           "--profile", "paper-tiny", "--passages", "300", "--limit", "20", "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    rep = json.loads((out / "report.json").read_text())
    assert rep["not_run"] and rep["seconds"] < 60 and set(rep["parts"]) | set(rep["not_run"]) == set(plan.PARTS)
    for part, why in rep["not_run"].items():       # stopped, or not started for want of margin
        assert why == rep.get("stopped") == "stopped at the 20 s limit" or "10 s of margin" in why, why
        assert f"{part} ({why})" in rep["paragraph"]
    # the part the stop cut short keeps what it had written (SeaKR's path checks come first)
    assert [p for p, e in rep["parts"].items() if e.get("running")] in ([], [list(rep["parts"])[-1]])
    if "seakr" in rep["parts"]:
        assert rep["parts"]["seakr"]["path_checks"]["graph"]["ok"]
    assert rep["paragraph"] in proc.stdout
    done = (rep["parts"].get("seakr") or {}).get("questions") or {}
    assert proc.returncode == (0 if len(done) == 2 else 1)


@pytest.mark.heavy
@pytest.mark.timeout(3600)
def test_the_check_at_llama_2_7bs_layers_predicts_every_peak_and_prices_the_profile(tmp_path):
    """paper-tiny (the paper's settings but its sizes) at the narrow shape, LLaMA-2-7B's 32 layers
    and vocabulary, on the simulated card, which predicts each method's peak at 7B."""
    rep, said = _check_card(tmp_path, "--profile", "paper-tiny")
    print(rep["paragraph"])
    assert rep["shape"] == "narrow" and rep["profile"] == "paper-tiny"
    for method in ("seakr", "cot", "ircot", "self_rag", "flare", "dragin"):
        entry = rep["parts"]["seakr"] if method == "seakr" else rep["parts"]["methods"]["methods"][method]
        assert entry["predicted_7b"]["from"] == "this run" and entry["predicted_7b"]["peak_bytes"] > 12 * GiB
    # 20 rows x 20 tokens at narrow widths hold about 9 MiB of suffix cache: less than the segments
    # the allocator reserves beyond the bytes in tensors, so no cap fails k rows and fits k/2 (at
    # 7B the gap is about 0.5 GiB); the retry itself is tests/test_oom_retry_memory.py's
    oom = rep["parts"]["oom"]
    assert oom["half_rows_peak_bytes"] >= oom["uncapped_allocated_bytes"] and not oom["runs"], oom
    assert "segments swallow the rows" in rep["paragraph"]
    assert "predicted at LLaMA-2-7B" in rep["paragraph"] and "hours" in rep["paragraph"]


def test_the_oom_part_retries_under_its_cap_where_the_rows_outweigh_the_segments(tmp_path, monkeypatch):
    """The allocator's segments shrunk to KiB, so the tiny shape's rows (their logits over LLaMA-2's
    32,000 tokens) leave a window between the k/2 pass's reserved peak and the k-row call's
    allocated one, as 7B's 0.5 GiB of suffix cache does on a card: the part's cap schedule,
    retry and same-width comparison run as they would there."""
    from seakr_repro.doubles import caching_allocator as ca, simulated_card as sc
    from seakr_repro.card_check import parts

    for name, kib in (("SMALL_SIZE", 32), ("SMALL_BUFFER", 64), ("LARGE_BUFFER", 256), ("MIN_LARGE_ALLOC", 128),
                      ("ROUND_LARGE", 64)):
        monkeypatch.setattr(ca, name, kib * 1024)
    opt = argparse.Namespace(device="cpu", shape="tiny", profile="paper-tiny", passages=300)
    sc.activate(sc.SimulatedCard())
    try:
        oom = parts.oom(parts.Run(opt, tmp_path))
    finally:
        sc.deactivate()
    assert oom["half_rows_peak_bytes"] < oom["uncapped_allocated_bytes"] and oom["retry_ran"], oom
    retried = [r for r in oom["runs"] if r["ok"] and r["oom_retries"]]
    assert retried and all(r["rows_per_forward"] == r["compared_at_rows"] == parts.K // 2 and r["same_tokens"]
                           and r["peak_bytes"] <= r["cap_bytes"] for r in retried)
