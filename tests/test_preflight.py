"""Preflight: everything a profile needs is checked before anything long starts, and every
missing piece is reported at once, each with where to get it and where to put it."""

import pytest

from seakr_repro.runs import inputs
from seakr_repro.core import paths
from seakr_repro.runs import preflight
from seakr_repro.steps import prepare
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, UserError

GiB = 1024 ** 3


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """Nothing downloaded: empty data/raw and cache, no HF cache, 10 GiB free, no GPU."""
    import torch
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path / "raw")
    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr("seakr_repro.retrieval.index.CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("SEAKR_MODEL_PATH", raising=False)
    monkeypatch.setattr(preflight, "free_bytes", lambda path: 10 * GiB)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return tmp_path


def _paper(tmp_path, **extra):
    return load_config("paper", {"model.path": str(tmp_path / "models" / "llama"),
                                 "corpus.tsv_path": str(tmp_path / "dpr" / "psgs_w100.tsv"),
                                 "prompts.official_repo": str(tmp_path / "raw" / "SeaKR"),
                                 "prompts.dragin_repo": str(tmp_path / "raw" / "DRAGIN"), **extra})


def test_every_missing_piece_in_one_error(bare_machine):
    with pytest.raises(DataMissingError) as err:
        preflight.check(_paper(bare_machine), announce=False)
    text = str(err.value)
    assert "15 missing pieces" in text      # the DRAGIN clone for the faithful baselines among them
    for piece in ("model llama-2-7b-chat", "models/llama", "huggingface-cli download",   # model
                  "psgs_w100.tsv", "corpus.tsv_path",                                    # corpus
                  "data set 2wiki", "data set hotpotqa", "data set iirc", "data set nq",
                  "data set triviaqa", "data set squad", "hotpot_dev_distractor_v1.json",
                  "hotpotqa/hotpotqa-dev.json", "iirc/iirc_train_dev/dev.json",          # each layout
                  "top-10 passages of nq", "top-10 passages of triviaqa", "top-10 passages of squad",
                  str(bare_machine / "raw" / "singlehop_data" / "sq_top10.json"), "singlehop_data.zip",
                  "SeaKR's clone", str(bare_machine / "raw" / "SeaKR"), "git clone",
                  "disk: the paper profile needs about", "10.0 GiB is free",
                  "torch sees no CUDA GPU",
                  "SeaKR's clone (prompts.official_repo)", "git clone https://github.com/THU-KEG/SeaKR",
                  "DRAGIN's clone (prompts.dragin_repo)", "git clone https://github.com/oneal2000/DRAGIN"):
        assert piece in text, piece
    assert "selfrag" not in text        # optional rows are skipped, not missing


def test_optional_models_are_skipped_with_the_reason_unless_strict(bare_machine):
    cfg = _paper(bare_machine)
    report = preflight.run_checks(cfg)
    skipped = "\n".join(report.skipped)
    assert "Self-RAG rows of Tables 1/2" in skipped and "model.paths.selfrag-llama2-7b" in skipped
    assert "llama-3-8b row of Table 4" in skipped
    assert not any("llama-2-7b-chat" in s for s in report.skipped)   # the profile's own model
    assert "notebook 11's mechanism experiments" in skipped and "biencoder-nq-dev.json" in skipped
    strict = preflight.run_checks(cfg, strict=True)
    assert any("selfrag-llama2-7b" in p for p in strict.problems)


def test_model_path_serves_the_profiles_own_model_only(bare_machine):
    """model.path names the profile's model; Self-RAG comes from model.paths only."""
    llama = bare_machine / "models" / "llama"
    llama.mkdir(parents=True)
    (llama / "config.json").write_text("{}")
    report = preflight.run_checks(_paper(bare_machine))
    assert "model llama-2-7b-chat" in report.ok
    assert any("selfrag" in s for s in report.skipped)
    selfrag = bare_machine / "models" / "selfrag"
    selfrag.mkdir()
    (selfrag / "config.json").write_text("{}")
    cfg = _paper(bare_machine, **{"model.paths": {"selfrag-llama2-7b": str(selfrag)}})
    assert "model selfrag-llama2-7b" in preflight.run_checks(cfg).ok


def test_a_small_gpu_is_named(bare_machine, monkeypatch):
    import torch
    from types import SimpleNamespace
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=16 * GiB))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Tiny GPU")
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda i: 1.0)
    problems = preflight.run_checks(_paper(bare_machine)).problems
    gpu = [p for p in problems if p.startswith("GPU")]
    assert len(gpu) == 2 and "Tiny GPU has 16.0 GiB" in gpu[0] and "float16" in gpu[0]
    assert "in float16 (baselines.dtype_when_too_large) needs about 18.0 GiB" in gpu[1]
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=24 * GiB))
    # 24 GB holds the fp16 model, not the faithful baselines' float32 one (DRAGIN's load): by
    # default they load in float16 and preflight says so; with the setting null it is a problem
    report = preflight.run_checks(_paper(bare_machine))
    assert not any(p.startswith("GPU") for p in report.problems)
    assert any("loads in float16, NOT float32" in x and "30.6 GiB" in x for x in report.ok), report.ok
    gpu = [p for p in preflight.run_checks(_paper(bare_machine, **{"baselines.dtype_when_too_large": None})
                                           ).problems if p.startswith("GPU")]
    assert len(gpu) == 1 and "baselines load llama-2-7b-chat in float32" in gpu[0]
    assert "baselines.dtype: float16" in gpu[0] and "baselines.dtype_when_too_large: float16" in gpu[0]
    cfg = _paper(bare_machine, **{"baselines.dtype": "float16", "baselines.dtype_when_too_large": None})
    assert not any(p.startswith("GPU") for p in preflight.run_checks(cfg).problems)
    # a 40 GiB card, capped at 24 GiB (the card check's cap): the cap decides
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=40 * GiB))
    report = preflight.run_checks(_paper(bare_machine))
    assert not any(p.startswith("GPU") for p in report.problems)
    assert not any("NOT float32" in x for x in report.ok)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda i: 0.6)
    assert any("NOT float32" in x and "capped" in x for x in preflight.run_checks(_paper(bare_machine)).ok)


def test_the_baselines_other_dtype_is_named_only_when_it_is_not_the_models():
    """Faithful baselines load the paper's float16 model in float32, as DRAGIN's code does; fixed
    ones, or a baselines.dtype equal to model.dtype, load it as the profile says (None)."""
    assert preflight.baselines_other_dtype(load_config("paper")) == "float32"
    assert preflight.baselines_other_dtype(load_config("paper", {"baselines.mode": "fixed"})) is None
    assert preflight.baselines_other_dtype(load_config("paper", {"baselines.dtype": "float16"})) is None


def test_the_baselines_dtype_that_fits_decides_from_preflights_estimate():
    cfg = load_config("paper")
    need32 = preflight.gpu_need_bytes(cfg, "float32")
    assert preflight.dtype_that_fits(cfg, "float32", None) == ("float32", None)            # no GPU
    assert preflight.dtype_that_fits(cfg, "float32", need32) == ("float32", None)          # fits exactly
    dtype, note = preflight.dtype_that_fits(cfg, "float32", need32 - 1, gpu="Card")
    assert dtype == "float16" and "NOT float32" in note and "baselines.dtype_when_too_large" in note
    assert preflight.dtype_that_fits(cfg, None, 1) == (None, None)                         # model.dtype
    assert preflight.dtype_that_fits(cfg, "float16", 1) == ("float16", None)               # is model.dtype
    with pytest.raises(UserError, match="baselines.dtype_when_too_large"):
        preflight.dtype_that_fits(load_config("paper", {"baselines.dtype_when_too_large": None}),
                                  "float32", need32 - 1)


def test_built_parts_are_not_counted_again(bare_machine):
    cfg = _paper(bare_machine)
    before = preflight.disk_need_bytes(cfg)
    corpus = prepare.corpus_path(cfg)
    corpus.parent.mkdir(parents=True)
    corpus.write_text("{}\n")
    from seakr_repro.runs.disk_needs import estimate_needs
    need = estimate_needs(cfg)
    assert need["index"] == 771          # the index of the one passage on disk, not of 21M
    assert before > sum(need.values())
    assert preflight.disk_need_bytes(cfg) == sum(need.values()) - need["corpus_jsonl"]
    assert any("corpus dpr-wiki (built" in x for x in preflight.run_checks(cfg).ok)


def test_shipped_profiles_pass(monkeypatch):
    monkeypatch.setattr(preflight, "free_bytes", lambda path: 100 * GiB)
    report = preflight.check(load_config("smoke"), announce=False)
    assert not report.problems and "data set bundled-2wiki" in report.ok


def test_reproduce_stops_before_any_notebook(bare_machine, tmp_path, monkeypatch):
    """A refused run leaves the last run's record alone: the Lab's notebooks (PROFILE = None) still
    open the profile that ran, and `status` judges it by that run's --set and --param."""
    from seakr_repro import pipeline
    results = tmp_path / "results"
    monkeypatch.setattr(pipeline, "results_dir", lambda p: results / p)
    monkeypatch.setattr(pipeline, "run_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    monkeypatch.setenv("SEAKR_MODEL_PATH", str(tmp_path / "nowhere"))
    (results / "paper").mkdir(parents=True)
    (results / "last-profile").write_text("default\n")
    recorded = '{"overrides": {"seed": 7}, "parameters": {}}'
    (results / "paper" / pipeline.LAST_RUN).write_text(recorded)
    with pytest.raises(DataMissingError, match="missing pieces"):
        pipeline.reproduce("paper", progress=False, overrides={"seed": 3})
    assert (results / "last-profile").read_text() == "default\n"
    assert (results / "paper" / pipeline.LAST_RUN).read_text() == recorded


def test_cli_exit_2_without_traceback(bare_machine, capsys):
    from seakr_repro.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["preflight", "--profile", "paper", "--set", f"model.path={bare_machine}/m"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err.startswith("error: profile 'paper'")
    assert "will be skipped: the Self-RAG rows" in captured.out



def test_up_to_date_steps_need_no_preflight(monkeypatch, tmp_path):
    """Every step up to date: nothing to run, so nothing is checked and nothing fails."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from seakr_repro import pipeline
    monkeypatch.setattr(pipeline, "results_dir", lambda p: tmp_path / "results" / p)
    (tmp_path / "nbs").mkdir()
    nb = new_notebook(cells=[new_code_cell("pass")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "nbs" / "00-x.ipynb")
    run = lambda: [r.status for r in pipeline.reproduce("smoke", notebooks_dir=tmp_path / "nbs",  # noqa: E731
                                                         progress=False)]
    calls = []
    real = preflight.run_checks
    monkeypatch.setattr(preflight, "run_checks", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert run() == ["ran"] and calls == [1]
    assert (tmp_path / "results" / "last-profile").read_text() == "smoke\n"
    monkeypatch.setattr(preflight, "run_checks", lambda *a, **k: pytest.fail("checked"))
    (tmp_path / "results" / "last-profile").write_text("default\n")
    assert run() == ["up-to-date"]
    assert (tmp_path / "results" / "last-profile").read_text() == "smoke\n"    # a run, though nothing ran


def test_the_grid_loads_the_baselines_in_what_fits_and_names_it_in_the_runs_settings(capsys):
    from seakr_repro.artifacts import spec_for
    from seakr_repro.runs import grid

    cfg = load_config("paper")
    pool = grid.BackendPool(cfg, loader=lambda *a: pytest.fail("nothing is loaded here"))
    pool.card_bytes = lambda: 24 * GiB
    settings = grid.method_settings(cfg, "dragin", {})
    assert grid._dtype_on_card(cfg, pool, spec_for("dragin"), settings) == "float16"
    assert settings["dtype"] == "float16"             # the run's key: another run than float32's
    assert "NOT float32" in pool.departures["dragin"] and "WARNING dragin" in capsys.readouterr().out
    settings = grid.method_settings(cfg, "seakr", {})
    assert grid._dtype_on_card(cfg, pool, spec_for("seakr"), settings) is None and "dtype" not in settings
    pool.card_bytes = lambda: 40 * GiB
    settings = grid.method_settings(cfg, "cot", {})
    assert grid._dtype_on_card(cfg, pool, spec_for("cot"), settings) == "float32"
