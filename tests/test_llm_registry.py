"""Model registry: specs, the middle layer, and clear errors for models that cannot ship."""
import pytest

from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.llm import model_info, registry
from seakr_repro.llm.sampling_settings import Sampling


def test_middle_layer_is_the_official_choice():
    assert model_info.middle_layer(32) == 15
    assert model_info.middle_layer(30) == 14
    assert model_info.middle_layer(18) == 8


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
    cfg = load_config("paper", {"model.path": str(tmp_path), "model.name": "llama-3-8b"})
    with pytest.raises(DataMissingError, match="model.path") as err:
        registry.model_dir("llama-3-8b", cfg)
    assert str(tmp_path) in str(err.value)
    cfg = load_config("paper", {"model.paths": {"llama-3-8b": str(tmp_path / "x")}})
    with pytest.raises(DataMissingError, match="model.paths.llama-3-8b") as err:
        registry.model_dir("llama-3-8b", cfg)
    assert str(tmp_path / "x") in str(err.value)


def _hf_dir(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_model_path_and_its_variable_name_the_profiles_own_model_only(monkeypatch, tmp_path):
    """With LLaMA-2-chat under model.path / SEAKR_MODEL_PATH, the Self-RAG and backbone rows must
    not silently run it: other models come from model.paths only."""
    monkeypatch.delenv("SEAKR_MODEL_PATH", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    chat = _hf_dir(tmp_path / "llama-2-7b-chat")
    for cfg in (load_config("paper", {"model.path": str(chat)}), load_config("paper")):
        if cfg.get("model.path") is None:
            monkeypatch.setenv("SEAKR_MODEL_PATH", str(chat))
        assert cfg["model.name"] == "llama-2-7b-chat"
        assert registry.model_dir("llama-2-7b-chat", cfg) == chat
        for other in ("llama-3-8b", "llama-2-7b"):
            with pytest.raises(DataMissingError, match=f"model.paths.{other}"):
                registry.model_dir(other, cfg)
    base = _hf_dir(tmp_path / "llama-2-7b")
    cfg = load_config("paper", {"model.path": str(chat), "model.paths": {"llama-2-7b": str(base)}})
    assert registry.model_dir("llama-2-7b", cfg) == base


def test_a_self_rag_checkpoint_needs_its_reflection_tokens(tmp_path, monkeypatch):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from llama_tok import build_tokenizer

    from seakr_repro.llm.reflection_tokens import SCORED_TOKENS, check_reflection_tokens
    plain = build_tokenizer(tmp_path / "plain")           # an ordinary LLaMA-style vocabulary
    with pytest.raises(UserError, match=r"not a Self-RAG checkpoint.*\[Retrieval\]") as err:
        check_reflection_tokens(plain, tmp_path / "plain")
    assert "model.paths.selfrag-llama2-7b" in str(err.value)
    plain.add_special_tokens({"additional_special_tokens": list(SCORED_TOKENS)})
    check_reflection_tokens(plain, tmp_path / "plain")     # Self-RAG's added tokens: accepted
    # through the registry: model.paths names a directory holding a plain LLaMA tokenizer
    d = tmp_path / "not-selfrag"
    build_tokenizer(d).save_pretrained(d)
    (d / "config.json").write_text("{}")
    cfg = load_config("paper", {"model.paths": {"selfrag-llama2-7b": str(d)}})
    with pytest.raises(UserError, match="not a Self-RAG checkpoint"):
        registry.model_dir("selfrag-llama2-7b", cfg)


def test_device_and_dtype_settings_are_checked():
    assert registry.resolve_device("cpu") == "cpu"
    with pytest.raises(UserError, match="model.device"):
        registry.resolve_device("tpu")
    with pytest.raises(UserError, match="model.dtype"):
        model_info.resolve_dtype("float8")


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
    s = b.sample("Question: Who wrote Hamlet?\nAnswer:", Sampling(k=2, max_new_tokens=4, seed=1))
    assert s.vectors.shape == (2, 640) and s.layer == 8
