import re

import pytest

from seakr_repro.core import disk
from seakr_repro.core.errors import UserError
from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.runs import disk_needs, inputs, plan

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
TABLE_ROWS = {"corpus JSONL": "corpus_jsonl", "Lucene index": "index", "LLM call cache": "call_cache",
              "step-02 vectors": "step02_vectors", "run files": "run_files", "**total**": "total"}


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


def documented_needs() -> dict[str, dict[str, tuple[float, str]]]:
    """profile -> part -> (figure, unit) of docs/disk-and-memory.md's table of each profile's needs."""
    text = (REPO_ROOT / "docs" / "disk-and-memory.md").read_text(encoding="utf-8")
    head, body = text.split("| | smoke | default | paper |\n", 1)
    profiles = ["smoke", "default", "paper"]
    out: dict[str, dict] = {p: {} for p in profiles}
    for line in body.split("\n\n", 1)[0].splitlines()[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in TABLE_ROWS:
            for profile, cell in zip(profiles, cells[1:]):
                number, unit = re.search(r"([\d.]+) (KiB|MiB|GiB)", cell).groups()
                out[profile][TABLE_ROWS[cells[0]]] = (float(number), unit)
    return out


def test_the_documented_table_is_the_estimate(tmp_path, monkeypatch):
    """docs/disk-and-memory.md's table of what each profile needs is estimate_needs' output, to the
    table's one decimal: neither changes without the other."""
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)       # no corpus built: the known counts
    documented = documented_needs()
    assert all(set(parts) == set(TABLE_ROWS.values()) for parts in documented.values())
    for profile, parts in documented.items():
        needs = disk_needs.estimate_needs(load_config(profile))
        needs["total"] = sum(needs.values())
        assert {part: round(needs[part] / UNITS[unit], 1) for part, (_, unit) in parts.items()} == \
            {part: number for part, (number, _) in parts.items()}, profile


def test_the_paper_s_two_field_layout_takes_more_room_and_the_default_less(tmp_path, monkeypatch):
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)
    paper = disk_needs.estimate_needs(load_config("paper"))
    one_field = disk_needs.estimate_needs(load_config("paper", {"retrieval.scheme": "single_field"}))
    # the two-field BM25 keeps the text twice in its corpus file and indexes two fields; the rest
    # does not depend on the layout
    assert paper["corpus_jsonl"] > one_field["corpus_jsonl"] and paper["index"] > one_field["index"]
    assert {k: v for k, v in paper.items() if k not in ("corpus_jsonl", "index")} == \
        {k: v for k, v in one_field.items() if k not in ("corpus_jsonl", "index")}
    default = disk_needs.estimate_needs(load_config("default"))
    assert all(default[k] < paper[k] for k in paper)


def test_per_question_needs_follow_the_profile_s_question_counts(tmp_path, monkeypatch):
    """A 2-question profile needs a 2-question profile's call cache and run files: each run's
    questions as the cost count has them (datasets.n_questions, a notebook's N_QUESTIONS, the
    analysis sample), not the paper's full sets."""
    from seakr_repro.core.config import load_config
    from seakr_repro.runs.plan import question_runs

    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path)

    def needs(overrides):
        return disk_needs.estimate_needs(load_config("paper", overrides))

    full = needs({})
    small_cfg = load_config("paper", {"datasets.n_questions": 2, "analysis.n_questions": 2})
    assert set(question_runs(small_cfg)["questions"]) == {2}
    one, two = (needs({"datasets.n_questions": n, "analysis.n_questions": n}) for n in (1, 2))
    # per question: twice the questions, twice the bytes
    assert two["run_files"] == 2 * one["run_files"] and two["call_cache"] == 2 * one["call_cache"]
    assert two["run_files"] < full["run_files"] / 1000 and two["call_cache"] < full["call_cache"] / 1000
    # a notebook's own cap counts too, question by question: notebook 04 on 3, 6, 9 of each set
    capped = [needs({"notebooks.04-complex-qa.N_QUESTIONS": n})["call_cache"] for n in (3, 6, 9)]
    assert capped[0] < capped[1] < capped[2] < full["call_cache"]
    assert capped[1] - capped[0] == capped[2] - capped[1]


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
    paper = disk_needs.estimate_needs(load_config("paper"))        # the real TSV's 21,015,324 passages
    assert disk_needs.corpus_passages(cfg) == 4_811
    assert all(needs[k] * 21_015_324 == paper[k] * 4_811 for k in ("corpus_jsonl", "index"))
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
    paper = disk_needs.estimate_needs(load_config("paper"))          # LLaMA-2-7B: 32 layers of 4,096
    assert standin["step02_vectors"] * (32 * 4096) == paper["step02_vectors"] * (4 * 64)
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
    # priced as a profile that asks for those 5 questions of each set
    asked = disk_needs.estimate_needs(load_config("paper", {"datasets.n_questions": 5, "analysis.n_questions": 5}))
    assert small["run_files"] == asked["run_files"]
    assert small["run_files"] < full["run_files"] / 100 and small["call_cache"] < full["call_cache"] / 100
    assert plan.question_runs(cfg)["questions"].sum() > 10_000         # the paper's sets
