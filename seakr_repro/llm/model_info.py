"""Facts about a model that the registry, the backends and the cache all need. Imports nothing from
the backends or the registry (no import circle), and torch only inside `resolve_dtype`."""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..core.errors import UserError


def middle_layer(n_layers: int) -> int:
    """The official SeaKR layer: n_layers // 2 - 1 (15 for LLaMA-2-7B's 32 layers), 0-based."""
    return n_layers // 2 - 1


def resolve_dtype(dtype: str):
    """The torch dtype a `model.dtype` setting names."""
    import torch
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise UserError(f"unknown dtype '{dtype}'", setting="model.dtype",
                        fix="use float32, bfloat16 or float16")
    return table[dtype]


def weights_fingerprint(path: Path, dtype, device: str = "cpu") -> str:
    """Identify the weights cheaply: config, file names, sizes and the first/last MiB of each; a
    GPU draws other samples than the CPU from the same seed, so its calls are cached apart."""
    h = hashlib.sha256(str(dtype).encode())
    kind = str(device).split(":")[0]
    if kind != "cpu":
        h.update(f"device:{kind}".encode())
    cfg = path / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def generation_config_of(path: Path) -> dict:
    """The checkpoint's generation_config.json ({}: greedy), which `model.generate` follows when
    called without decoding arguments, as DRAGIN's code calls it (the faithful baselines)."""
    import json

    f = Path(path) / "generation_config.json"
    if not f.is_file():
        return {}
    try:
        out = json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"the checkpoint's generation config cannot be read ({e})", path=f,
                        fix="restore the file from the model's repository") from None
    if not isinstance(out, dict):
        raise UserError("the checkpoint's generation config is not a JSON object", path=f,
                        fix="restore the file from the model's repository")
    return out


def text_config(config):
    """The language model's part of a config (multimodal configs such as Gemma-3 nest it)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def model_dims(config, tokenizer) -> tuple[int, int, int]:
    """(n_layers, hidden_size, eos_token_id) of a model: the tokenizer's EOS, else the config's
    (the first of a list)."""
    cfg = text_config(config)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else cfg.eos_token_id
    return (int(cfg.num_hidden_layers), int(cfg.hidden_size),
            int(eos[0] if isinstance(eos, (list, tuple)) else eos))
