"""A LLaMA of a real shape with random weights (no weights can travel to a lent GPU): the
card check's, the decode benchmark's and the tests' model."""
from __future__ import annotations

# LLaMA-2-7B's architecture (its config.json), and small ones of the same family for CPU runs
SHAPES = {
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32),
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2),
    "small": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=4),
    # LLaMA-2-7B's 32 layers at narrow widths (intermediate / hidden as 7B's, 2.6875): a run on the
    # simulated card predicts the same run's peak at 7B (llm/peak_memory.py); head dims 26 and 22, a
    # length no generation limit of the profiles has, so no sequence is taken for a head dimension
    "narrow": dict(hidden_size=182, intermediate_size=489, num_hidden_layers=32, num_attention_heads=7,
                   num_key_value_heads=7),
    "narrow-5": dict(hidden_size=130, intermediate_size=349, num_hidden_layers=32, num_attention_heads=5,
                     num_key_value_heads=5),
    "narrow-22": dict(hidden_size=154, intermediate_size=414, num_hidden_layers=32, num_attention_heads=7,
                      num_key_value_heads=7),
}
LLAMA_2_VOCAB = 32_000       # the real tokenizer's; a random model takes its tokenizer's size
MODEL_BUILT: list = []       # called with each model built (doubles.simulated_card registers itself)


def random_llama(shape: str, tokenizer, device: str, dtype, seed: int = 0,
                 vocab_size: int | None = None):
    """A LlamaForCausalLM of `shape` with random weights, built directly on `device` in `dtype`
    (its vocabulary the tokenizer's, or `vocab_size`: LLaMA's 32,000 for a real-sized LM head).
    `initializer_range` 0.1 (not 0.02) so the samples' hidden states spread and U takes values
    around the official delta, as tests/paper_shaped.py's models do. The LM head's rows of the ids
    beyond the tokenizer's are zero: their logit 0 is below the largest of the tokenizer's ids'
    random logits, so greedy and top-k decoding pick only ids the tokenizer has (texts as long as a
    real tokenizer's), while the rows take their memory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape], vocab_size=vocab_size or len(tokenizer), max_position_embeddings=4096,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
                      initializer_range=0.1)
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)       # built in dtype: no float32 copy first (27 GB at 7B)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg).to(dtype)
    finally:
        torch.set_default_dtype(default)
    if cfg.vocab_size > len(tokenizer):
        with torch.no_grad():
            model.lm_head.weight[len(tokenizer):].zero_()
    for built in list(MODEL_BUILT):      # a simulated card counts it as weights, and learns its shape
        built(model)
    return model.eval()
