"""The profile's model as the benchmarks load it (transformers backend, call cache off: every call
is computed and timed), and twins of a loaded backend that differ in one path only."""
from __future__ import annotations


def profile_hf(profile: str):
    """(config, the profile's model on the transformers backend, uncached)."""
    from ..core.config import load_config
    from ..core.errors import UserError, report_and_exit
    from ..llm import load_backend

    try:
        cfg = load_config(profile, {"model.backend": "hf"})
        return cfg, load_backend(cfg, cache=False)
    except UserError as e:
        report_and_exit(e)


def decode_twin(new, decode: str):
    """The same model and settings with another shared-prefix decode path."""
    return type(new)(new.model, new.tokenizer, new.name, new.fingerprint, new.max_batch_rows,
                     new.prefix_cache_tokens, max_batch_contexts=new.max_batch_contexts, decode=decode)


def reference_twin(new):
    """The same model and settings on the reference path (the prompt cache copied into every row)."""
    return type(new)(new.model, new.tokenizer, new.name, new.fingerprint, new.max_batch_rows,
                     new.prefix_cache_tokens, shared_prefix=False, max_batch_contexts=new.max_batch_contexts,
                     decode=new.decode_path)
