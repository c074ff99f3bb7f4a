import pytest

from seakr_repro.runs import inputs
from seakr_repro.core import disk
from seakr_repro.runs import disk_needs
from seakr_repro.core.errors import UserError
from seakr_repro.runs import plan


@pytest.fixture(autouse=True)
def _no_prepared_sets(tmp_path, monkeypatch):
    """The estimates below are of sets not yet prepared (the repository's results/ may hold some)."""
    monkeypatch.setattr(plan, "RESULTS_ROOT", tmp_path / "results")


def test_human_bytes():
    assert disk.human_bytes(512) == "512 B"
    assert disk.human_bytes(1536) == "1.5 KiB"
    assert disk.human_bytes(3 * 1024 ** 3) == "3.0 GiB"


def test_free_bytes_of_a_path_not_yet_created(tmp_path):
    assert disk.free_bytes(tmp_path / "a" / "b" / "c.jsonl") > 0


def test_require_free_space_names_the_need_and_the_path(tmp_path):
    disk.require_free_space(tmp_path, 1, "a tiny step")
    with pytest.raises(UserError) as err:
        disk.require_free_space(tmp_path, 1 << 60, "the Lucene index")
    text = err.value.paragraph()
    assert "the Lucene index needs about" in text and str(tmp_path) in text and "Fix:" in text


def test_estimate_needs_per_profile(tmp_path, monkeypatch):
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)       # no corpus built: the known counts
    paper = disk_needs.estimate_needs(load_config("paper"))
    assert set(paper) == {"corpus_jsonl", "index", "call_cache", "step02_vectors", "run_files"}
    # 1,788 calibration questions x 2 hooks x 32 layers x 20 samples x 4,096 dims x 2 bytes
    assert paper["step02_vectors"] == 1788 * 2 * 32 * 20 * 4096 * 2
    # the paper's two-field BM25 keeps the text twice in its corpus file and indexes two fields
    assert paper["corpus_jsonl"] == 21_015_324 * 1_348 and paper["index"] == 21_015_324 * 771
    one_field = disk_needs.estimate_needs(load_config("paper", {"retrieval.scheme": "single_field"}))
    assert one_field["corpus_jsonl"] == 21_015_324 * 704 and one_field["index"] == 21_015_324 * 574
    default = disk_needs.estimate_needs(load_config("default"))
    assert all(default[k] < paper[k] for k in paper)
    assert default["step02_vectors"] == 40 * 2 * 30 * 10 * 576 * 2      # SmolLM2, N = 30 + 10


def test_per_question_needs_follow_the_profile_s_question_counts(tmp_path, monkeypatch):
    """A 2-question profile needs a 2-question profile's call cache and run files: each run's
    questions as the cost count has them (datasets.n_questions, a notebook's N_QUESTIONS, the
    analysis sample), not the paper's full sets."""
    from seakr_repro.core.config import load_config
    from seakr_repro.runs.cost import question_runs

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)
    full = disk_needs.estimate_needs(load_config("paper"))
    small_cfg = load_config("paper", {"datasets.n_questions": 2, "analysis.n_questions": 2})
    small = disk_needs.estimate_needs(small_cfg)
    runs = question_runs(small_cfg)
    assert set(runs["questions"]) == {2}
    expected = sum(n * disk_needs.RUN_BYTES_PER_QUESTION[m] for m, n in zip(runs["method"], runs["questions"]))
    assert small["run_files"] == expected and small["run_files"] < full["run_files"] / 1000
    assert small["call_cache"] < full["call_cache"] / 1000
    # a notebook's own cap counts too: notebook 04 on 3 questions of each set
    capped = disk_needs.estimate_needs(load_config("paper", {"notebooks.04-complex-qa.N_QUESTIONS": 3}))
    table1 = sum(disk_needs.CACHE_BYTES_PER_QUESTION[m]
                 for m in ("cot", "ircot", "self_rag", "flare", "dragin", "seakr"))
    assert full["call_cache"] - capped["call_cache"] == (12_576 + 7_405 + 954 - 3 * 3) * table1


def test_the_corpus_on_disk_is_measured_not_assumed(tmp_path, monkeypatch):
    """A stand-in psgs_w100.tsv of 4,811 passages is not the 21M of the real one (the issue's
    2-question profile was told 38.8 GiB); a large TSV is sized from its first MiB's lines."""
    from seakr_repro.core.config import load_config
    from seakr_repro.steps import prepare

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path / "cache")
    tsv = tmp_path / "psgs_w100.tsv"
    tsv.write_text("id\ttext\ttitle\n" + "".join(f'{i}\t"some passage text {i}"\tTitle {i}\n'
                                                for i in range(1, 4812)))
    cfg = load_config("paper", {"corpus.tsv_path": str(tsv)})
    needs = disk_needs.estimate_needs(cfg)
    assert needs["corpus_jsonl"] == 4_811 * 1_348 and needs["index"] == 4_811 * 771
    big = tmp_path / "big.tsv"
    with open(big, "w") as fh:
        fh.write("id\ttext\ttitle\n")
        for i in range(1, 60_001):
            fh.write(f'{i}\t"{"word " * (10 + i % 7)}"\tTitle {i}\n')
    sized = disk_needs.corpus_passages(load_config("paper", {"corpus.tsv_path": str(big)}))
    assert abs(sized - 60_000) < 1_200     # 2%
    # the profile's own place, data/raw/psgs_w100.tsv, follows SEAKR_RAW_DIR as the steps read it
    from seakr_repro.core import paths
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path)
    tsv.rename(tmp_path / "psgs_w100.tsv")
    assert disk_needs.corpus_passages(load_config("paper")) == 4_811
    corpus = prepare.corpus_path(cfg)                   # once converted, the corpus file counts
    corpus.parent.mkdir(parents=True)
    corpus.write_text('{"id": "1"}\n' * 7)
    assert disk_needs.corpus_passages(cfg) == 7


def test_the_model_named_by_model_path_gives_step_02_s_shape(tmp_path, monkeypatch):
    """Step 02's vectors are sized by the checkpoint model.path names (its config.json), not by
    the registry's LLaMA-2-7B: the paper-shaped test's 4-layer stand-in was told it needed 41.5
    GiB, and a CI machine with 37 GiB free refused to run it."""
    import json

    from seakr_repro.core.config import load_config

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 64}))
    standin = disk_needs.estimate_needs(load_config("paper", {"model.path": str(model)}))
    assert standin["step02_vectors"] == 1788 * 2 * 4 * 20 * 64 * 2
    assert disk_needs.model_shape(load_config("paper")) == (32, 4096)        # no model.path
    # a multimodal config nests the language model's numbers
    (model / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 18,
                                                                   "hidden_size": 640}}))
    assert disk_needs.model_shape(load_config("paper", {"model.path": str(model)})) == (18, 640)
    # model.paths.<model.name> is read as the loader reads it (llm.registry.given_dir)
    name = load_config("paper")["model.name"]
    assert disk_needs.model_shape(load_config("paper", {"model.paths": {name: str(model)}})) == (18, 640)
    # a directory without a config (preflight reports it) falls back to the registry's shape
    assert disk_needs.model_shape(load_config("paper", {"model.path": str(tmp_path / "x")})) == (32, 4096)


def test_method_runs_check_the_profile_s_disk_needs(tmp_path, monkeypatch):
    from seakr_repro.runs import grid
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(disk, "free_bytes", lambda path: 1024)
    with pytest.raises(UserError, match="call cache"):
        grid.run_grid(load_config("paper"), pool=None, searcher=None, specs=[], datasets=[])


def test_a_prepared_set_is_priced_as_prepared_and_the_projection_stays_the_paper_s(tmp_path, monkeypatch):
    """Step 00's files on disk (a sample, a stand-in) are what the grid will run, so the disk check
    prices them; the cost projection of the profile keeps the paper's sets."""
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)
    cfg = load_config("paper")
    full = disk_needs.estimate_needs(cfg)
    data = tmp_path / "results" / "paper" / "data"
    data.mkdir(parents=True)
    for name in list(cfg["datasets.complex"]) + list(cfg["datasets.simple"]):
        (data / f"{name}.jsonl").write_text('{"id": "q"}\n' * 5 + "\n")     # a blank line is no question
    small = disk_needs.estimate_needs(cfg)
    runs = plan.question_runs(cfg, prepared=True)
    assert set(runs["questions"]) == {5}
    assert small["run_files"] == sum(5 * disk_needs.RUN_BYTES_PER_QUESTION[m] for m in runs["method"])
    assert small["run_files"] < full["run_files"] / 100 and small["call_cache"] < full["call_cache"] / 100
    assert plan.question_runs(cfg)["questions"].sum() > 10_000         # the paper's sets
