"""benchmarks/decode at a tiny shape on the CPU (the GPU benchmark's code, so it cannot rot): the
report's structure, its checks passing on every decode path the CPU runs, failing on a broken
one, and its timings kept when a check fails or crashes."""
from __future__ import annotations

import json
import statistics

import pytest
import torch

from seakr_repro.benchmarks import decode as bench_decode
from seakr_repro.llm.hf import shared_prefix as sp
from seakr_repro.llm.hf.backend import HFBackend
from seakr_repro.llm.hf.decode import static as static_path
from seakr_repro.core.setting_choices import DECODE_PATHS, DECODE_SETTINGS

TINY = ["--device", "cpu", "--shape", "tiny", "--rows", "6", "--prompt-tokens", "300",
        "--new-tokens", "12", "--repeats", "1", "--check-rows", "3", "--check-tokens", "10",
        "--copy-mib", "16"]


def test_report_structure_and_every_path_passes_its_checks(tmp_path):
    out = tmp_path / "bench_decode.json"
    got = bench_decode.main(TINY + ["--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(got))
    assert got["ok"] is True
    assert got["commit"]["revision"] and got["device"] == "cpu" and got["torch"] == torch.__version__
    assert got["dtype"] == "float16" and got["rows"] == 6 and 250 <= got["prompt_tokens"] <= 300
    assert got["default_path"] == "one_sync"          # `auto` on the CPU
    fl = got["floor"]
    assert fl["copy_bytes_per_s"] > 0 and fl["step_bytes"]["weights"] > 0
    assert fl["weights_and_prefix_kv_ms"] > fl["weights_ms"] > 0
    assert set(got["paths"]) == set(got["checks"]) == set(DECODE_PATHS) - {"graph"}   # CUDA only
    assert "static" in got["paths"]
    for r in got["paths"].values():
        assert r["steps"] == 12 and r["ms_per_step"] > 0 and r["prefill_ms"] > 0
        assert r["tokens_per_s"] > 0 and r["x_floor"] > 1 and r["speedup_vs_python"] > 0
    # a path slower per step draws fewer tokens a second and stands further over the floor
    by_ms = sorted(got["paths"].values(), key=lambda r: r["ms_per_step"])
    assert [r["tokens_per_s"] for r in by_ms] == sorted((r["tokens_per_s"] for r in by_ms), reverse=True)
    assert [r["x_floor"] for r in by_ms] == sorted(r["x_floor"] for r in by_ms)
    for c in got["checks"].values():
        f32 = c["float32"]
        assert c["ok"] and f32["layers"] == 2
        assert f32["greedy_tokens_equal_f32"] and f32["sampled_tokens_equal_f32"]
        assert f32["stats_max_abs_diff_f32"] <= bench_decode.F32_LOGPROB_ABS
        assert c["at_float16"]["against"] == "python"


def test_a_lever_that_changes_the_attention_fails_its_checks(monkeypatch):
    real = sp._fused_decode

    def prefix_only(module, q5, key, value, groups, scale):
        # a broken lever: each row's own generated tokens are left out of its attention
        return real(module, q5, key[:, :, :1], value[:, :, :1], groups, scale)
    monkeypatch.setattr(sp, "_fused_decode", prefix_only)
    got = bench_decode.main(TINY + ["--paths", "python,fused", "--repeats", "1"])
    assert got["checks"]["python"]["ok"] is True
    bad = got["checks"]["fused"]
    assert bad["ok"] is False and not bad["float32"]["sampled_tokens_equal_f32"]
    assert got["ok"] is False


def test_a_broken_static_step_fails_its_checks(monkeypatch):
    """The static (and graph) step advancing its positions by two per step: every later token is
    rotated (RoPE) as if it stood elsewhere."""
    real = static_path.StaticStep.run

    def skipping(self):
        out = real(self)
        self.positions.add_(1)
        return out
    monkeypatch.setattr(static_path.StaticStep, "run", skipping)
    got = bench_decode.main(TINY + ["--paths", "one_sync,static"])
    assert got["checks"]["one_sync"]["ok"] is True
    bad, f32 = got["checks"]["static"], got["checks"]["static"]["float32"]
    # caught in float32: the tokens, or (where a tiny random model's tokens survive the shift, as
    # under transformers 5.17) the statistics, beyond float rounding
    assert bad["ok"] is False and f32["ok"] is False
    assert not f32["sampled_tokens_equal_f32"] or f32["stats_max_abs_diff_f32"] > 1e-3
    assert got["paths"]["static"]["ms_per_step"] > 0 and got["ok"] is False


def _gen(ids, logsumexp, ent=1.0, lp=-1.0):
    from seakr_repro.llm.base import Generation

    return Generation(text="", token_ids=list(ids), logprobs=[lp] * len(ids), entropies=[ent] * len(ids),
                      logsumexp=[logsumexp] * len(ids))


def test_the_same_dtype_check_compares_statistics_in_the_same_context_only():
    from seakr_repro.llm.base import SampleSet

    def pair(ids, logsumexp, **kw):
        g = _gen(ids, logsumexp, **kw)
        return g, SampleSet(samples=[g, g], vectors=None, layer=0, hook="mlp_out")
    want = pair([5, 6, 7, 8], 30.0)
    # statistics after the first differing token (another context) are not compared
    got = bench_decode.check_same_dtype(pair([5, 6, 9, 9], 30.2), want, "python")
    assert not got["greedy_tokens_equal"] and got["sampled_rows_equal"] == "0/2"
    assert got["stats_max_abs_diff"] == pytest.approx(0.2)
    far = bench_decode.check_same_dtype(pair([5, 6, 7, 8], 30.0, ent=2.0), want, "python")
    assert far["stats_max_diff_over_logsumexp"] == pytest.approx(1 / 30)


def test_a_float16_drift_between_paths_is_reported_not_judged(monkeypatch):
    """Two paths' float16 statistics after 32 random layers drift apart by their kernels' rounding
    (2.9% of the logsumexp between two attention kernels on the first card run): nothing float16
    promises. The verdict is the float32 check's, on the same weights."""
    monkeypatch.setattr(bench_decode, "check_same_dtype", lambda got, want, against: {
        "against": against, "stats_max_diff_over_logsumexp": 0.029})
    got = bench_decode.main(TINY + ["--paths", "python,static"])
    assert got["checks"]["static"]["at_float16"]["stats_max_diff_over_logsumexp"] == 0.029
    assert got["checks"]["static"]["float32"]["ok"] and got["ok"] is True


def test_timings_are_written_before_the_checks_and_kept_when_a_check_crashes(tmp_path, monkeypatch):
    out = tmp_path / "bench.json"
    seen = []

    def crash(*_a, **_k):
        seen.append(json.loads(out.read_text()))        # what the file held when the checks began
        raise RuntimeError("CUDA out of memory (injected)")
    monkeypatch.setattr(bench_decode, "check_float32", crash)
    got = bench_decode.main(TINY + ["--paths", "python,static", "--out", str(out)])
    assert seen[0]["paths"]["static"]["ms_per_step"] > 0 and seen[0]["checks"] == {}
    kept = json.loads(out.read_text())
    assert kept == json.loads(json.dumps(got)) and kept["ok"] is False
    for p in ("python", "static"):
        assert kept["paths"][p]["ms_per_step"] > 0
        assert kept["checks"][p]["ok"] is False and "injected" in kept["checks"][p]["error"]


def test_step_rates_known_case():
    """20 rows at 50 ms a step draw 400 tokens a second; a 5 ms floor makes the step 10 x it."""
    assert bench_decode.step_rates(20, 50.0, 5.0) == {"tokens_per_s": 400.0, "x_floor": 10.0}


def test_unknown_decode_path_is_refused():
    from seakr_repro.core.errors import UserError

    with pytest.raises(UserError) as err:
        HFBackend(None, None, "x", decode="graphs")     # refused before the model is touched
    text = err.value.paragraph()
    assert "model.decode" in text and "graphs" in text
    assert all(f"{name}" in text for name in DECODE_SETTINGS)      # the message lists every choice
    with pytest.raises(SystemExit, match="unknown decode path"):
        bench_decode.main(TINY + ["--paths", "python,graphs"])


def test_graph_asked_for_on_a_cpu_is_refused():
    """graph is left out on a CPU by default; asked for, it is refused (never run eagerly)."""
    from seakr_repro.core.errors import UserError

    with pytest.raises(UserError, match="model.decode"):
        bench_decode.main(TINY + ["--paths", "python,graph"])


def test_a_model_on_disk_instead_of_random_weights():
    got = bench_decode.main(["--device", "cpu", "--model", "smollm2-135m-instruct", "--dtype", "float32",
                             "--rows", "3", "--prompt-tokens", "120", "--new-tokens", "4",
                             "--repeats", "1", "--check-rows", "2", "--check-tokens", "4",
                             "--paths", "python,static", "--copy-mib", "16"])
    assert got["model"] == "smollm2-135m-instruct" and got["shape"] is None
    assert got["vocab"] == 49152 and got["ok"] is True
    assert got["checks"]["static"]["float32"]["greedy_tokens_equal_f32"]
    assert got["checks"]["static"]["float32"]["layers"] == 4


# --- the graph path, timed apart from its capture (simulated where no CUDA exists) -------------------
@pytest.fixture
def simulated_graph():
    from seakr_repro.doubles.simulated_graph import simulate_graph

    undo = simulate_graph()
    yield
    undo()


def test_the_graph_path_is_timed_over_its_replays_with_its_capture_apart(simulated_graph, monkeypatch):
    """Each timed call captures once (one part) and replays every step after the warm-up and the
    capture; a capture made slow (300 ms) shows in capture_s and the call's whole time, not in the
    step: the step is at most a call's time less its capture over its replays (counts, not a
    machine's speed, so it holds on a busy machine)."""
    import time

    from seakr_repro.doubles import simulated_graph as sim

    real = sim.SimulatedGraphStep._capture

    def slow(self):
        time.sleep(0.3)
        real(self)
    monkeypatch.setattr(sim.SimulatedGraphStep, "_capture", slow)
    got = bench_decode.main(TINY + ["--paths", "static,graph", "--repeats", "2"])
    g = got["paths"]["graph"]
    assert g["captures_per_call"] == [1, 1] and g["replays_per_call"] == [12 - 2] * 2
    assert g["capture_s"] >= 0.3 and "static step eagerly" in g["simulated"]
    assert g["ms_per_step_with_capture"] == pytest.approx(1000 * statistics.median(g["decode_seconds"]) / 12)
    assert g["ms_per_step"] <= max(1000 * (d - 0.3) / r for d, r in zip(g["decode_seconds"], g["replays_per_call"]))
    assert got["ok"] is True
    assert got["checks"]["graph"]["ok"] and g["same_tokens_as_static_at_float16"]
