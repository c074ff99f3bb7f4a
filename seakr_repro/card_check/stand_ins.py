"""What the card check loads in place of the real model and data: the LLaMA-style tokenizer and
random-weight models of a real shape, and the profile on stand-in data.
"""
from __future__ import annotations

import time
from pathlib import Path



def tokenizer_dir(work: Path) -> Path:
    """The LLaMA-style tokenizer every random model of the call uses (built once per call folder)."""
    out = Path(work) / "tok"
    if not (out / "tokenizer.json").is_file():
        from ..doubles.llama_tokenizer import build_tokenizer
        build_tokenizer(out)
    return out


class RandomLlamaLoader:
    """`runs.pool.BackendPool`'s (and the Ray workers') loader: any model name gives a random LLaMA
    of `shape` on `device` (Self-RAG's with its reflection tokens added), wrapped as
    `llm.load_backend` wraps a real one. `builds` holds each model's name, dtype and seconds to build."""

    def __init__(self, shape: str, device: str, tok_dir: str | Path):
        self.shape, self.device, self.tok_dir = shape, device, str(tok_dir)
        self.builds: list[dict] = []

    def __call__(self, cfg, name: str, dtype: str | None = None):
        import zlib

        from transformers import AutoTokenizer

        from ..doubles.random_llama import LLAMA_2_VOCAB, random_llama
        from ..llm.cache import CachedBackend
        from ..llm.hf.backend import HFBackend
        from ..llm.model_info import resolve_dtype
        from ..llm.reflection_tokens import SCORED_TOKENS

        tok = AutoTokenizer.from_pretrained(self.tok_dir)
        added = 0          # the model: LLaMA-2-7B's vocabulary (the tokenizer's ids are a part of it)
        if name.startswith("selfrag"):       # + the reflection tokens, as Self-RAG's checkpoint's
            added = tok.add_special_tokens({"additional_special_tokens": list(SCORED_TOKENS)})
        dtype = dtype or cfg.get("model.dtype", "float32")
        t0 = time.perf_counter()
        model = random_llama(self.shape, tok, self.device, resolve_dtype(dtype), seed=zlib.crc32(name.encode()),
                             vocab_size=LLAMA_2_VOCAB + added)
        self.builds.append({"model": name, "dtype": dtype, "vocab": model.config.vocab_size,
                            "seconds": round(time.perf_counter() - t0, 2)})
        backend = HFBackend(model, tok, name, fingerprint=f"random-{self.shape}-{name}-{dtype}",
                            max_batch_rows=cfg.get("model.max_batch_rows", None),
                            prefix_cache_tokens=cfg.get("model.prefix_cache_tokens", 16384),
                            shared_prefix=cfg.get("model.shared_prefix", True),
                            max_batch_contexts=cfg.get("model.max_batch_contexts", None),
                            decode=cfg.get("model.decode", "auto"))
        self.builds[-1]["decode"] = backend.decode_path
        # what save_pretrained writes for a model without one of its own: greedy decoding
        backend.generation_config = model.generation_config.to_diff_dict()
        if not cfg.get("cache.enabled", True):
            return backend
        return CachedBackend(backend, vectors=cfg.get("cache.vectors", "gram"))


def profile_inputs(profile: str, overrides: dict, questions: int, passages: int) -> tuple:
    """The profile on stand-in data: (cfg, searcher). Writes, under SEAKR_RAW_DIR /
    SEAKR_CACHE_DIR / SEAKR_RESULTS_DIR (the check's process points them into its folder):
    synthetic questions as step 00's prepared files, the official clones' and top-10 files'
    stand-ins, a synthetic corpus and its bm25s index (the profile's own paths:
    `prepare.ensure_index`). Retrieval is bm25s (Lucene needs Java, which cannot travel; bm25s has
    only the single_field scheme, so the paper's es_best_fields becomes single_field)."""
    from ..core.config import load_config
    from ..core.io import write_jsonl
    from ..core.paths import RAW_DIR, results_dir
    from ..data.corpus import STORED_FIELDS, write_corpus
    from ..data.records import QuestionRecord
    from ..doubles.standins import write_standins
    from ..llm.synthetic import synthetic_passages, synthetic_question
    from ..runs.inputs import corpus_path, open_profile_searcher
    from ..steps.prepare import ensure_index

    repo = write_standins(RAW_DIR, questions)
    cfg = load_config(profile, overrides={
        "retrieval.backend": "bm25s", "retrieval.scheme": "single_field",
        "prompts.official_repo": str(repo), "prompts.dragin_repo": str(RAW_DIR / "DRAGIN"), **overrides})
    for name in list(cfg["datasets.complex"]) + list(cfg["datasets.simple"]):
        recs = [QuestionRecord.from_dict(synthetic_question(name, i)) for i in range(questions)]
        write_jsonl(results_dir(cfg.profile) / "data" / f"{name}.jsonl", (r.to_dict() for r in recs))
    corpus = corpus_path(cfg)
    if not corpus.is_file():
        write_corpus(synthetic_passages(passages), corpus, progress=False, fields=STORED_FIELDS)
    ensure_index(cfg, progress=False)
    return cfg, open_profile_searcher(cfg)


def run_file_rows(cfg, dataset: str, label: str) -> list[dict]:
    """The rows of `label`'s current run file on `dataset`, in the order they were written."""
    from ..core.paths import results_dir
    from ..runs.runner import current_name, read_results

    folder = results_dir(cfg.profile) / "runs" / dataset
    name = current_name(folder, label)
    if name is None:
        raise RuntimeError(f"no run file of {label} in {folder}")
    return read_results(folder / name)
