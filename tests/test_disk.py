import pytest

from seakr_repro.core import disk
from seakr_repro.steps import disk_needs
from seakr_repro.core.errors import UserError


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


def test_estimate_needs_per_profile():
    from seakr_repro.core.config import load_config

    paper = disk_needs.estimate_needs(load_config("paper"))
    assert set(paper) == {"corpus_jsonl", "index", "call_cache", "step02_vectors", "run_files"}
    # 1,788 calibration questions x 2 hooks x 32 layers x 20 samples x 4,096 dims x 2 bytes
    assert paper["step02_vectors"] == 1788 * 2 * 32 * 20 * 4096 * 2
    # the paper's two-field BM25 keeps the text twice in its corpus file; one field keeps it once
    assert paper["corpus_jsonl"] == 21_015_324 * disk_needs.JSONL_BYTES_PER_PASSAGE * 2
    one_field = disk_needs.estimate_needs(load_config("paper", {"retrieval.scheme": "single_field"}))
    assert one_field["corpus_jsonl"] == 21_015_324 * disk_needs.JSONL_BYTES_PER_PASSAGE
    default = disk_needs.estimate_needs(load_config("default"))
    assert all(default[k] < paper[k] for k in paper)
    assert default["step02_vectors"] == 40 * 2 * 30 * 10 * 576 * 2      # SmolLM2, N = 30 + 10


def test_method_runs_check_the_profile_s_disk_needs(tmp_path, monkeypatch):
    from seakr_repro.steps import grid
    from seakr_repro.core.config import load_config

    monkeypatch.setattr(disk, "free_bytes", lambda path: 1024)
    with pytest.raises(UserError, match="call cache"):
        grid.run_grid(load_config("paper"), pool=None, searcher=None, specs=[], datasets=[])
