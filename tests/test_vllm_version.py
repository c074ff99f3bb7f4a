"""The vLLM backend starts only on the vLLM release its hooks were tested against (no vLLM needed)."""
import warnings

import pytest

from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.llm import registry
from seakr_repro.llm.vllm import backend as vllm_backend
from seakr_repro.llm.vllm.backend import TESTED_VLLM, VLLMBackend, check_vllm_version


@pytest.mark.parametrize("version", [TESTED_VLLM, TESTED_VLLM + "+cpu"])
def test_the_tested_release_passes(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_vllm_version(version) is None


@pytest.mark.parametrize("version", ["0.33.0", "0.31.0", "0.4.2", None])
def test_another_release_is_refused_naming_the_override(version):
    with pytest.raises(UserError) as err:
        check_vllm_version(version)
    text = err.value.paragraph()
    assert f"vllm=={TESTED_VLLM}" in text and "model.vllm.allow_untested_version" in text
    with pytest.warns(UserWarning, match="starting it anyway"):
        assert check_vllm_version(version, allow_untested=True)


def test_the_backend_checks_the_installed_version_before_starting(monkeypatch):
    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: None)
    monkeypatch.setattr(vllm_backend, "installed_vllm_version", lambda: "0.33.0")
    with pytest.raises(UserError, match="0.33.0 is installed"):
        VLLMBackend.from_dir("/nonexistent", name="x", device="cpu")


def test_the_override_reaches_the_backend(monkeypatch):
    seen = {}

    def fake(path, **kw):
        seen.update(kw)
        raise UserError("stop here")

    monkeypatch.setattr(VLLMBackend, "from_dir", staticmethod(fake))
    for value in (False, True):
        cfg = load_config("default", {"model.backend": "vllm", "model.device": "cpu",
                                      "model.vllm.allow_untested_version": value})
        with pytest.raises(UserError, match="stop here"):
            registry.load_backend(cfg)
        assert seen["allow_untested_version"] is value


def test_pyproject_pins_the_tested_release():
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert meta["project"]["optional-dependencies"]["vllm"] == [f"vllm=={TESTED_VLLM}"]
