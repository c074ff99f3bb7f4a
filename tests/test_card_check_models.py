"""The card check's random models stand for LLaMA-2-7B: every model has its 32,000-token
vocabulary (the embedding and LM head a 7B card holds), Self-RAG's with its reflection tokens added,
as its checkpoint has them; the small test tokenizer's ids are a part of it, and the models decode
only those (their texts as long as a real tokenizer's)."""
from __future__ import annotations

import pytest
import torch

from seakr_repro.doubles.random_llama import LLAMA_2_VOCAB
from seakr_repro.llm.reflection_tokens import SCORED_TOKENS
from seakr_repro.card_check.stand_ins import RandomLlamaLoader, tokenizer_dir
from seakr_repro.llm.sampling_settings import Sampling

SETTINGS = {"model.dtype": "float32", "cache.enabled": False}


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return tokenizer_dir(tmp_path_factory.mktemp("call"))


@pytest.mark.parametrize("name", ["llama-2-7b-chat", "selfrag-llama2-7b"])
def test_the_loaders_models_have_llama_2s_vocabulary_and_decode_the_tokenizers_ids(tok_dir, name):
    loader = RandomLlamaLoader("tiny", "cpu", tok_dir)
    backend = loader(SETTINGS, name)
    extra = len(SCORED_TOKENS) if name.startswith("selfrag") else 0
    vocab = backend.model.config.vocab_size
    assert vocab == LLAMA_2_VOCAB + extra == loader.builds[-1]["vocab"] == backend.model.lm_head.weight.shape[0]
    assert len(backend.tokenizer) < 2000
    prompt = "Question: Who directed the film? Answer:"
    ss = backend.sample(prompt, Sampling(k=20, max_new_tokens=12, seed=3))
    greedy = backend.generate(prompt, max_new_tokens=12)
    drawn = {t for s in ss.samples for t in s.all_token_ids} | set(greedy.all_token_ids)
    assert len(drawn) > 50 and max(drawn) < len(backend.tokenizer)
    with torch.no_grad():               # the tokenizer's ids still spread over its part of the head
        assert backend.model.lm_head.weight[:len(backend.tokenizer)].abs().sum(-1).min() > 0
