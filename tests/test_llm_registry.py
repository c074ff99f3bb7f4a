"""Model registry: specs, the middle layer, and clear errors for models that cannot ship."""
import pytest

from seakr_repro.config import load_config
from seakr_repro.errors import DataMissingError, UserError
from seakr_repro.llm import registry


def test_middle_layer_is_the_official_choice():
    assert registry.middle_layer(32) == 15
    assert registry.middle_layer(30) == 14
    assert registry.middle_layer(18) == 8


def test_specs_cover_the_paper_backbones():
    for name in ("smollm2-135m-instruct", "gemma-3-270m", "llama-2-7b", "llama-2-7b-chat",
                 "llama-3-8b", "llama-3-8b-instruct", "selfrag-llama2-7b"):
        spec = registry.MODELS[name]
        assert spec.name == name and spec.n_layers > 0 and spec.hidden > 0
    assert registry.MODELS["llama-2-7b-chat"].chat and not registry.MODELS["llama-2-7b"].chat
    with pytest.raises(UserError, match="model.name"):
        registry.get_spec("gpt-5")


def test_missing_llama_names_model_path_and_how_to_download(monkeypatch, tmp_path):
    monkeypatch.delenv("SEAKR_MODEL_PATH", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-home" / "hub"))
    cfg = load_config("paper")
    with pytest.raises(DataMissingError) as err:
        registry.model_dir("llama-2-7b-chat", cfg)
    msg = str(err.value)
    assert "model.path" in msg and "meta-llama/Llama-2-7b-chat-hf" in msg and "download" in msg


def test_a_wrong_model_path_is_named(tmp_path):
    cfg = load_config("paper", {"model.path": str(tmp_path)})
    with pytest.raises(DataMissingError, match="model.path") as err:
        registry.model_dir("llama-3-8b", cfg)
    assert str(tmp_path) in str(err.value)


def test_device_and_dtype_settings_are_checked():
    assert registry.resolve_device("cpu") == "cpu"
    with pytest.raises(UserError, match="model.device"):
        registry.resolve_device("tpu")
    with pytest.raises(UserError, match="model.dtype"):
        registry.resolve_dtype("float8")


def test_load_backend_wraps_the_default_model_in_the_cache():
    from seakr_repro.llm.cache import CachedBackend
    cfg = load_config("smoke")
    b = registry.load_backend(cfg)
    assert isinstance(b, CachedBackend) and b.name == "smollm2-135m-instruct"
    assert (b.n_layers, b.hidden_size) == (30, 576)
    assert not isinstance(registry.load_backend(cfg, cache=False), CachedBackend)


@pytest.mark.slow
def test_gemma_loads_from_its_pip_packages_or_says_why_not():
    try:
        b = registry.load_backend(None, name="gemma-3-270m", device="cpu", cache=False)
    except DataMissingError as e:
        assert "gemma" in str(e).lower()
        pytest.skip(str(e))
    assert (b.n_layers, b.hidden_size) == (18, 640)
    s = b.sample("Question: Who wrote Hamlet?\nAnswer:", k=2, max_new_tokens=4, seed=1)
    assert s.vectors.shape == (2, 640) and s.layer == 8
