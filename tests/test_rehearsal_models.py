"""The rehearsal's random models stand for LLaMA-2-7B: every part's model has its 32,000-token
vocabulary (the embedding and LM head a 7B card holds), Self-RAG's with its reflection tokens added,
as its checkpoint has them; the call's tokenizer names every id such a model samples and encodes
as the small trained one does."""
from __future__ import annotations

import pytest

from seakr_repro.doubles.random_llama import LLAMA_2_VOCAB
from seakr_repro.llm.reflection_tokens import SCORED_TOKENS
from seakr_repro.rehearsal.fixtures import RandomLlamaLoader, tokenizer_dir

SETTINGS = {"model.dtype": "float32", "cache.enabled": False}


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return tokenizer_dir(tmp_path_factory.mktemp("call"))


@pytest.mark.parametrize("name", ["llama-2-7b-chat", "selfrag-llama2-7b"])
def test_the_loaders_models_have_llama_2s_vocabulary(tok_dir, name):
    loader = RandomLlamaLoader("tiny", "cpu", tok_dir)
    backend = loader(SETTINGS, name)
    extra = len(SCORED_TOKENS) if name.startswith("selfrag") else 0
    vocab = backend.model.config.vocab_size
    assert vocab == LLAMA_2_VOCAB + extra == loader.builds[-1]["vocab"]
    assert backend.model.lm_head.weight.shape[0] == vocab == len(backend.tokenizer)
    assert all(p is not None for p in backend.tokenizer.convert_ids_to_tokens(list(range(vocab))))


def test_the_calls_tokenizer_encodes_as_the_small_one(tok_dir, tmp_path):
    from transformers import AutoTokenizer

    from seakr_repro.doubles.llama_tokenizer import build_tokenizer

    small, full = build_tokenizer(tmp_path / "small"), AutoTokenizer.from_pretrained(tok_dir)
    text = "Question: Who directed the film? Answer: The film was directed by Ada Lovelace, née Byron."
    assert len(small) < 2000 and len(full) == LLAMA_2_VOCAB
    assert full(text)["input_ids"] == small(text)["input_ids"]
    assert full.decode(full(text)["input_ids"], skip_special_tokens=True) == text


def test_gpu_checks_model_has_llama_2s_vocabulary(tok_dir):
    from seakr_repro.rehearsal.parts.gpu_check import measure

    got = measure(tok_dir, k=2, prompt_tokens=20, max_new_tokens=2, rows="2", device="cpu", dtype="float32",
                  shape="tiny")
    assert got["vocab"] == LLAMA_2_VOCAB and got["runs"][0]["max_batch_rows"] == 2
