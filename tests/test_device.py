"""model.device: auto for the default profile, the profile's gpu: sizes on a GPU, the device and
dtype in every artifact's provenance and in the rendered tables."""
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from seakr_repro.core import device as D
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError


@pytest.fixture
def gpu(monkeypatch):
    """A machine where torch sees one CUDA GPU (nothing runs on it)."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Test GPU 24GB")
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda i=0: 1.0)
    return torch


@pytest.fixture
def no_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_default_profile_resolves_its_device_on_the_machine(gpu, monkeypatch):
    assert load_config("default")["model.device"] == "auto"
    assert D.resolve_device("auto") == "cuda"
    monkeypatch.setattr(gpu.cuda, "is_available", lambda: False)
    assert D.resolve_device("auto") == "cpu"
    with pytest.raises(UserError, match="model.device"):
        D.resolve_device("cuda")
    with pytest.raises(UserError, match="auto, cpu or cuda"):
        D.resolve_device("tpu")


def test_gpu_section_gives_notebooks_07_and_11_their_full_sizes_on_a_gpu(gpu):
    on_gpu = load_config("default")["notebooks"]
    assert on_gpu["07-backbones"] == {"N_CAL_FANOUT": 40, "N_CAL_BUNDLED": 20}
    assert on_gpu["11-mechanisms"] == {"N_QUESTIONS": None}
    assert on_gpu["09-efficiency"] == {"N_QUESTIONS": 2}          # the rest keeps the CPU sizes
    # cpu asked for: the CPU sizes; an override still wins over the gpu section
    assert load_config("default", {"model.device": "cpu"})["notebooks"]["07-backbones"]["N_CAL_FANOUT"] == 15
    assert load_config("default", {"notebooks.11-mechanisms.N_QUESTIONS": 50}
                       )["notebooks"]["11-mechanisms"]["N_QUESTIONS"] == 50
    assert load_config("default")["uncertainty.k"] == 10          # the sizes no notebook parameter holds


def test_a_profile_extending_default_keeps_its_own_sizes_on_a_gpu(gpu, tmp_path):
    from seakr_repro.core.paths import PARAMS_DIR

    smoke = load_config("smoke")["notebooks"]
    assert smoke["07-backbones"]["N_CAL_FANOUT"] == 2 and smoke["11-mechanisms"]["N_QUESTIONS"] == 3
    for name in ("base", "default"):
        (tmp_path / f"{name}.yaml").write_text((PARAMS_DIR / f"{name}.yaml").read_text())
    # what the child does not set comes from default's gpu section; its own gpu section wins last
    (tmp_path / "child.yaml").write_text("extends: default\nuncertainty:\n  k: 6\n"
                                         "gpu:\n  uncertainty:\n    k: 12\n")
    child = load_config("child", params_dir=tmp_path)
    assert child["uncertainty.k"] == 12 and child["notebooks"]["11-mechanisms"] == {"N_QUESTIONS": None}
    with pytest.raises(UserError, match="cannot set the gpu section"):
        load_config("default", {"gpu.uncertainty.k": 20})


def test_gpu_section_is_ignored_on_the_cpu(no_gpu):
    nb = load_config("default")["notebooks"]
    assert nb["07-backbones"] == {"N_CAL_FANOUT": 15, "N_CAL_BUNDLED": 5}
    assert nb["11-mechanisms"] == {"N_QUESTIONS": 160}


def test_gpu_section_is_checked_like_the_profile(tmp_path, no_gpu):
    from seakr_repro.core.paths import PARAMS_DIR

    (tmp_path / "base.yaml").write_text((PARAMS_DIR / "base.yaml").read_text())
    (tmp_path / "p.yaml").write_text("model:\n  device: auto\ngpu:\n  uncertainty:\n    kk: 20\n")
    with pytest.raises(UserError) as err:
        load_config("p", params_dir=tmp_path)
    assert "gpu.uncertainty.kk" in str(err.value) and "line 5" in str(err.value)
    assert "uncertainty.k" in str(err.value)
    (tmp_path / "p.yaml").write_text("gpu:\n  model:\n    device: cpu\n")
    with pytest.raises(UserError, match="cannot set model.device"):
        load_config("p", params_dir=tmp_path)
    (tmp_path / "p.yaml").write_text("gpu:\n  uncertainty:\n    k: twenty\n")
    with pytest.raises(UserError, match="must be an integer"):
        load_config("p", params_dir=tmp_path)
    # cuda asked for: the section applies whatever this machine has (the run then says no GPU)
    (tmp_path / "p.yaml").write_text("model:\n  device: cuda\ngpu:\n  uncertainty:\n    k: 20\n")
    assert load_config("p", params_dir=tmp_path)["uncertainty.k"] == 20


def test_provenance_records_the_device_and_dtype(gpu, monkeypatch, tmp_path):
    from seakr_repro.core.provenance import provenance, read_compute, save_json

    rec = provenance(load_config("default", {"model.dtype": "bfloat16"}))["compute"]
    assert rec == {"device": "cuda", "gpu": "Test GPU 24GB", "dtype": "bfloat16",
                   "setting": "auto", "backend": "hf"}
    monkeypatch.setattr(gpu.cuda, "is_available", lambda: False)
    save_json({"x": 1}, tmp_path / "a.json", load_config("default"))
    assert read_compute(tmp_path / "a.json")["device"] == "cpu"
    # a cuda profile rendered on a machine without one is recorded, not an error
    assert provenance(load_config("paper"))["compute"]["device"] == "cuda (unavailable)"
    assert read_compute(tmp_path / "missing.json") is None


def test_compute_note_names_each_kind_of_machine():
    cpu = {"device": "cpu", "gpu": None, "dtype": "float32"}
    h100 = {"device": "cuda", "gpu": "NVIDIA H100", "dtype": "bfloat16"}
    assert D.compute_note([cpu, dict(cpu)]) == "Computed on CPU, float32."
    assert D.compute_note([h100]) == "Computed on GPU (NVIDIA H100), bfloat16."
    mixed = D.compute_note([cpu, h100, None])
    assert "mix" in mixed and "CPU, float32" in mixed and "not recorded" in mixed
    assert D.compute_note([]) == ""
    assert D.compute_note([None]).startswith("Device and dtype not recorded")


def test_gpu_calls_are_cached_apart_from_the_cpus(tmp_path):
    import torch

    from seakr_repro.llm.model_info import weights_fingerprint

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"w" * 100)
    cpu = weights_fingerprint(tmp_path, torch.float32)
    assert weights_fingerprint(tmp_path, torch.float32, "cpu") == cpu      # old caches still serve
    assert weights_fingerprint(tmp_path, torch.float32, "cuda") != cpu
    assert weights_fingerprint(tmp_path, torch.float32, "cuda:0") == weights_fingerprint(
        tmp_path, torch.float32, "cuda")


def test_preflight_checks_the_gpu_that_auto_picks(gpu, monkeypatch):
    from seakr_repro.runs import preflight

    GiB = 1024 ** 3
    monkeypatch.setattr(gpu.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=GiB // 4))
    report = preflight.Report()
    preflight.check_gpu(load_config("default"), report)
    assert report.problems and "Test GPU 24GB" in report.problems[0]
    monkeypatch.setattr(gpu.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=24 * GiB))
    report = preflight.Report()
    preflight.check_gpu(load_config("default"), report)
    assert not report.problems and "gpu: settings apply" in report.ok[0]
    monkeypatch.setattr(gpu.cuda, "is_available", lambda: False)
    report = preflight.Report()
    preflight.check_gpu(load_config("default"), report)
    assert not report.problems and report.ok[0].startswith("device: CPU")


def _results_with_compute(tmp_path, monkeypatch, compute):
    """A finished Table 1 step of the default profile whose provenance says `compute`."""
    from seakr_repro.core import paths

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path / "results")
    out = tmp_path / "results" / "default" / "04-complex-qa"
    out.mkdir(parents=True)
    pd.DataFrame([{"method": "seakr", "dataset": "bundled-2wiki", "metric": m, "value": 10.0,
                   "low": 5.0, "high": 15.0, "n": 8} for m in ("em", "f1")]
                 ).to_csv(out / "results.csv", index=False)
    (out / "results.csv.provenance.json").write_text(json.dumps({"compute": compute}))
    return out


def test_tables_say_where_their_results_were_computed(tmp_path, monkeypatch, no_gpu):
    from seakr_repro.steps import render

    cfg = load_config("default")
    _results_with_compute(tmp_path, monkeypatch, {"device": "cuda", "gpu": "NVIDIA H100",
                                                  "dtype": "bfloat16"})
    md, tex = render.render_table(cfg, "table1", out_dir=tmp_path / "tables")
    # from the results' provenance, not from this (CPU) machine
    assert "Computed on GPU (NVIDIA H100), bfloat16." in md.read_text()
    assert "Computed on GPU (NVIDIA H100), bfloat16." in tex.read_text()
    assert "Computed on GPU (NVIDIA H100), bfloat16." in render.beside_paper("table1", cfg)


def test_claims_ledger_says_where_its_inputs_were_computed(tmp_path, monkeypatch, no_gpu):
    from seakr_repro.steps import claims as C

    out = _results_with_compute(tmp_path, monkeypatch, {"device": "cpu", "gpu": None, "dtype": "float32"})
    (out / "results.csv.provenance.json").write_text(json.dumps(
        {"compute": {"device": "cpu", "gpu": None, "dtype": "float32"}}))
    scores = out.parent / "03-uncertainty-estimators"      # one claim measured: the ledger is written
    scores.mkdir()
    pd.DataFrame({"incorrect": [0, 1] * 5, "eigen": [float(i) for i in range(10)],
                  "est:perplexity": [float(i % 3) for i in range(10)]}).to_csv(scores / "question_scores.csv",
                                                                              index=False)
    (scores / "question_scores.csv.provenance.json").write_text(json.dumps(
        {"compute": {"device": "cpu", "gpu": None, "dtype": "float32"}}))
    C.render_ledger(load_config("default"), out_dir=tmp_path / "tables", n_boot=10)
    assert "Computed on CPU, float32." in (tmp_path / "tables" / "claims.md").read_text()
    assert "Computed on CPU, float32." in (tmp_path / "tables" / "claims.tex").read_text()
    prov = json.loads((tmp_path / "tables" / "claims.csv.provenance.json").read_text())
    cpu = {"device": "cpu", "gpu": None, "dtype": "float32"}
    assert prov["inputs_compute"] == {"04-complex-qa/results.csv": cpu,
                                      "03-uncertainty-estimators/question_scores.csv": cpu}


def test_claims_inputs_name_every_file_the_ledger_reads():
    import inspect
    import re

    from seakr_repro.steps import claims as C

    readers = [C._Saved] + [claim.measure for claim in C.CLAIMS]
    src = "".join(map(inspect.getsource, readers)).replace("{MECHANISMS}", C.MECHANISMS)
    read = set(re.findall(r'"([\w./-]+\.csv)"', src))
    assert read and all(any(i == name or i.endswith("/" + name) for i in C.INPUTS) for name in read)


@pytest.mark.skipif(D._gpu_driver_files(), reason="a GPU driver is here: torch is asked")
def test_loading_the_default_profile_does_not_import_torch_without_a_gpu_driver():
    import subprocess
    import sys

    code = ("import sys; from seakr_repro.core.config import load_config; "
            "cfg = load_config('default'); print('torch' in sys.modules, cfg['notebooks']['11-mechanisms'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(" ", 1)[0] == "False" and "160" in out
