"""tools/bench_decode at a tiny shape on the CPU (the GPU benchmark's code, so it cannot rot): the
report's structure, its checks passing on every decode path, and failing on a broken one."""
from __future__ import annotations

import json

import pytest
import torch

from seakr_repro.llm.hf import shared_prefix as sp
from seakr_repro.llm.hf.backend import HFBackend
from seakr_repro.llm.hf.decode.names import DECODE_PATHS
from seakr_repro.tools import bench_decode

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
    for r in got["paths"].values():
        assert r["steps"] == 12 and r["ms_per_step"] > 0 and r["prefill_ms"] > 0
        assert r["tokens_per_s"] == pytest.approx(6 * 1000 / r["ms_per_step"])
        assert r["speedup_vs_python"] > 0
    for c in got["checks"].values():
        assert c["greedy_tokens_equal_f32"] and c["sampled_tokens_equal_f32"]
        assert c["stats_max_abs_diff_f32"] <= bench_decode.F32_LOGPROB_ABS
        assert c["vectors_rel_half"] <= bench_decode.HALF_VECTOR_REL


def test_a_lever_that_changes_the_attention_fails_its_checks(monkeypatch):
    real = sp._fused_decode

    def prefix_only(module, q5, key, value, groups, scale):
        # a broken lever: each row's own generated tokens are left out of its attention
        return real(module, q5, key[:, :, :1], value[:, :, :1], groups, scale)
    monkeypatch.setattr(sp, "_fused_decode", prefix_only)
    got = bench_decode.main(TINY + ["--paths", "python,fused", "--repeats", "1"])
    assert got["checks"]["python"]["ok"] is True
    bad = got["checks"]["fused"]
    assert bad["ok"] is False and not bad["sampled_tokens_equal_f32"]
    assert got["ok"] is False


def test_unknown_decode_path_is_refused():
    from seakr_repro.core.errors import UserError

    with pytest.raises(UserError, match="model.decode.*auto, python, one_sync, fused, static, graph"):
        HFBackend(None, None, "x", decode="graphs")     # refused before the model is touched
    with pytest.raises(SystemExit, match="unknown decode path"):
        bench_decode.main(TINY + ["--paths", "python,graphs"])


def test_a_model_on_disk_instead_of_random_weights():
    got = bench_decode.main(["--device", "cpu", "--model", "smollm2-135m-instruct", "--dtype", "float32",
                             "--rows", "3", "--prompt-tokens", "120", "--new-tokens", "4",
                             "--repeats", "1", "--check-rows", "2", "--check-tokens", "4",
                             "--paths", "python,fused", "--copy-mib", "16"])
    assert got["model"] == "smollm2-135m-instruct" and got["shape"] is None
    assert got["vocab"] == 49152 and got["ok"] is True
    assert got["checks"]["fused"]["greedy_tokens_equal_f32"]
