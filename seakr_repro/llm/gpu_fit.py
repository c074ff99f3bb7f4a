"""How much GPU memory a model needs, by one estimate, and the dtype the faithful baselines load in
on a card too small for theirs. Preflight (runs/preflight.py) checks a profile with it before a
run; the run grid (runs/grid.py) decides with it when it loads a model: the same numbers, so what
preflight promised is what the run does."""
from __future__ import annotations

from ..core.config import Config
from ..core.disk import human_bytes
from ..core.errors import UserError

# GPU memory: the weights plus DECODING_BYTES, a measured peak beside LLaMA-2-7B's 16-bit weights with
# the prompt's keys and values copied into every row: more than shared-prefix decoding needs
# (docs/speed.md, "24 GB cards"), so the reserve errs on the safe side.
PARAMETERS = {"llama-2-7b": 6.74e9, "llama-2-7b-chat": 6.74e9, "selfrag-llama2-7b": 6.74e9,
              "llama-3-8b": 8.03e9, "llama-3-8b-instruct": 8.03e9,
              "smollm2-135m-instruct": 0.135e9, "gemma-3-270m": 0.27e9}
BYTES_PER_VALUE = {"float32": 4, "bfloat16": 2, "float16": 2}
DECODING_BYTES = 5.9e9


def gpu_need_bytes(cfg: Config, dtype: str | None = None, name: str | None = None) -> int | None:
    """GPU memory a model (default: the profile's) needs in `dtype` (default: model.dtype): its
    weights plus DECODING_BYTES (None: a model or dtype this table does not know)."""
    params = PARAMETERS.get(name or cfg["model.name"])
    per_value = BYTES_PER_VALUE.get(dtype or cfg["model.dtype"])
    if params is None or per_value is None:
        return None
    return int(params * per_value + DECODING_BYTES)


def dtype_that_fits(cfg: Config, dtype: str | None, card: int | None, name: str | None = None,
                    gpu: str = "the GPU") -> tuple[str | None, str | None]:
    """(the dtype to load a model in, the departure to announce or None) on a GPU of `card` bytes
    (`core.device.usable_gpu_bytes`; None: no GPU). Only a dtype other than model.dtype (the
    faithful baselines' float32) that does not fit is replaced, by baselines.dtype_when_too_large;
    a UserError where that is null or does not fit either."""
    if dtype is None or card is None or dtype == cfg["model.dtype"]:
        return dtype, None
    need = gpu_need_bytes(cfg, dtype, name)
    if need is None or need <= card:
        return dtype, None
    instead = cfg.get("baselines.dtype_when_too_large")
    if instead is None:
        raise UserError(f"the {cfg['baselines.mode']} baselines load {cfg['model.name']} in {dtype} (as DRAGIN's "
                        f"code does), about {human_bytes(need)} of GPU memory, but {gpu} has {human_bytes(card)} "
                        f"(fix: use a larger GPU, or set baselines.dtype_when_too_large: float16 or baselines.dtype: "
                        f"{cfg['model.dtype']}, a departure from DRAGIN's runs)",
                        setting="baselines.dtype_when_too_large")
    smaller = gpu_need_bytes(cfg, instead, name)
    if smaller is not None and smaller > card:
        raise UserError(f"{name or cfg['model.name']} in {instead} (baselines.dtype_when_too_large) needs about "
                        f"{human_bytes(smaller)} of GPU memory either, and {gpu} has {human_bytes(card)}",
                        setting="baselines.dtype_when_too_large", fix="use a larger GPU")
    return instead, (f"{name or cfg['model.name']} loads in {instead}, NOT {dtype}: {dtype} needs about "
                     f"{human_bytes(need)} of GPU memory (preflight's estimate), {gpu} has "
                     f"{human_bytes(card)} (baselines.dtype_when_too_large: {instead}; a departure from "
                     f"DRAGIN's runs, which loaded {dtype})")
