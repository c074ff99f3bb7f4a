"""Test doubles the tests, the benchmarks and the card check share: a LLaMA-style tokenizer,
random-weight LLaMA models of real shapes, stand-ins of the official files, a GPU card simulated
on a CPU (simulated_card.py)."""

# the environment variable that puts a process on a simulated card (simulated_card.activate_from_env);
# here, so a process can look for it without importing torch
SIMULATED_CARD_ENV = "SEAKR_SIMULATED_CARD"
