"""Test doubles the tests, the benchmarks and the GPU rehearsal share: a LLaMA-style tokenizer,
random-weight LLaMA models of real shapes, stand-ins of the official files."""
