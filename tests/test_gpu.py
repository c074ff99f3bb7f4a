"""GPU paths (run where CUDA is; skipped elsewhere): bf16 on a randomly initialised LLaMA-shaped
model agrees with float32, and sampling is reproducible on the GPU."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(500)} | {"[UNK]": 500, "</s>": 501}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="</s>", unk_token="[UNK]")
    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=4, vocab_size=502, eos_token_id=501)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg), tok


def _backend(model, tok, dtype):
    import copy

    from seakr_repro.llm.hf.backend import HFBackend

    return HFBackend(copy.deepcopy(model).to("cuda", dtype), tok, "tiny-llama")


def test_bf16_vectors_track_float32_and_sampling_is_reproducible(tiny_llama):
    import torch

    model, tok = tiny_llama
    prompt = " ".join(f"w{i % 400}" for i in range(300))
    f32, bf16 = _backend(model, tok, torch.float32), _backend(model, tok, torch.bfloat16)
    args = dict(k=6, max_new_tokens=12, seed=3, layer=1, hook="mlp_out")
    a, b = f32.sample(prompt, **args), f32.sample(prompt, **args)
    assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples]
    np.testing.assert_array_equal(a.vectors, b.vectors)
    # bf16 samples may diverge; compare the vectors of the same completions instead
    comps = [s.token_ids for s in a.samples]
    v32 = f32._eos_vectors(f32._prefill(f32._encode(prompt))[0], comps, 1, "mlp_out")
    v16 = bf16._eos_vectors(bf16._prefill(bf16._encode(prompt))[0], comps, 1, "mlp_out")
    rel = np.abs(v16 - v32).max() / np.abs(v32).max()
    assert rel < 0.05
