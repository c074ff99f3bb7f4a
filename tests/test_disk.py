import pytest

from seakr_repro import disk
from seakr_repro.errors import UserError


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
