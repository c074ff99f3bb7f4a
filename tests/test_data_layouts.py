"""The dev sets are found in each layout the official instructions leave: ours, DRAGIN's download
lines (hotpotqa/hotpotqa-dev.json) and SeaKR's multihop_data.zip (iirc/iirc_train_dev/dev.json)."""
import shutil
from pathlib import Path

import pytest

from seakr_repro.core import paths
from seakr_repro.core.errors import DataMissingError
from seakr_repro.data import registry
from seakr_repro.data.loaders import load_hotpotqa, load_iirc

FIX = Path(__file__).parent / "fixtures" / "datasets"
HOTPOT, IIRC = FIX / "hotpotqa" / "hotpot_dev_distractor_v1.json", FIX / "iirc" / "dev.json"


@pytest.fixture
def raw(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RAW_DIR", tmp_path)
    return tmp_path


def _put(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    return dst


@pytest.mark.parametrize("name, src, rel", [
    ("hotpotqa", HOTPOT, "hotpotqa/hotpot_dev_distractor_v1.json"),
    ("hotpotqa", HOTPOT, "hotpotqa/hotpotqa-dev.json"),
    ("iirc", IIRC, "iirc/dev.json"),
    ("iirc", IIRC, "iirc/iirc_train_dev/dev.json"),
    ("iirc-train", IIRC, "iirc/iirc_train_dev/train.json"),
])
def test_each_official_layout_is_read(raw, name, src, rel):
    assert not registry.dataset_available(name)
    _put(src, raw / rel)
    assert registry.dataset_available(name)
    assert registry.get_spec(name).required_files() == [raw / rel]
    assert registry.load_dataset(name)


def test_the_folder_is_enough_in_every_layout(tmp_path):
    _put(HOTPOT, tmp_path / "h" / "hotpotqa-dev.json")
    _put(IIRC, tmp_path / "i" / "iirc_train_dev" / "dev.json")
    assert load_hotpotqa(tmp_path / "h") == load_hotpotqa(HOTPOT)
    assert load_iirc(tmp_path / "i") == load_iirc(IIRC)


def test_the_missing_message_names_every_accepted_layout(raw):
    text = registry.describe_missing("hotpotqa")
    assert str(raw / "hotpotqa/hotpot_dev_distractor_v1.json") in text
    assert str(raw / "hotpotqa/hotpotqa-dev.json") in text
    text = registry.describe_missing("iirc")
    assert str(raw / "iirc/dev.json") in text and str(raw / "iirc/iirc_train_dev/dev.json") in text
    with pytest.raises(DataMissingError) as err:      # the error still names the expected path
        registry.load_dataset("iirc")
    assert str(raw / "iirc" / "dev.json") in str(err.value)
