"""Predicting a run's peak at another LLaMA shape (llm/peak_memory.py, doubles/simulated_card.py):
the parameter count of known models, the kind of known tensors, and the known case that matters:
a run on the simulated card at one shape predicts the peak the same run measures at another shape
of the same layer count, in float32 and float16."""
from __future__ import annotations

import pytest
import torch

from seakr_repro.doubles import random_llama as rl
from seakr_repro.doubles.llama_tokenizer import build_tokenizer
from seakr_repro.doubles.simulated_card import SimulatedCard
from seakr_repro.llm.sampling_settings import Sampling
from seakr_repro.llm.hf.backend import HFBackend
from seakr_repro.llm.peak_memory import Dims, kind_of, scales

# two widths of one layer count (heads x head dim: 3 x 16 and 5 x 16): fast on a CPU
WIDTHS = {"A": dict(hidden_size=48, intermediate_size=129, num_hidden_layers=3, num_attention_heads=3,
                    num_key_value_heads=3),
          "B": dict(hidden_size=80, intermediate_size=215, num_hidden_layers=3, num_attention_heads=5,
                    num_key_value_heads=5)}


def test_parameters_of_known_models():
    assert Dims.shape(rl.SHAPES["llama-2-7b"], 32_000, 2).parameters() == 6_738_415_616   # LLaMA-2-7B's
    tok = type("Tok", (), {"bos_token_id": 1, "eos_token_id": 2, "__len__": lambda self: 900})()
    for shape in ("tiny", "narrow-5"):
        model = rl.random_llama(shape, tok, "meta", torch.float16, vocab_size=1000)
        assert Dims.of(model.config, 2).parameters() == sum(p.numel() for p in model.parameters())


def test_the_kinds_of_known_tensors():
    d = Dims.shape(rl.SHAPES["narrow"], 32_000, 2)                     # 7 heads of 26, hidden 182
    assert kind_of((1, 7, 1500, 26), True, d) == "heads"               # a prompt's keys
    assert kind_of((20, 7, 1, 99, 26), True, d) == "heads"             # rows' suffix, grouped
    assert kind_of((20, 32_000), True, d) == "vocab"                   # the rows' logits
    assert kind_of((7, 2020, 1500), True, d) == "scores"               # the prefix's attention scores
    assert kind_of((20, 1, 182), True, d) == "hidden" and kind_of((20, 1, 489), True, d) == "mlp"
    assert kind_of((20, 101), False, d) == "other"                     # token ids
    with pytest.raises(ValueError, match="layer count"):
        scales(d, Dims.shape(rl.SHAPES["tiny"], 32_000, 2))


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def _seakr_step(shape: str, tok, dtype, predict: dict) -> dict:
    """SeaKR's call (a greedy row and k samples over a prompt kept in the prefix cache) at `shape` on a
    simulated card: its peak, weights and predicted peaks (read while the model is on the card)."""
    prompt = " ".join(["Question: who was born first, Aristotle or Plato?"] * 20)
    card = SimulatedCard(predict=predict)
    with card:
        model = rl.random_llama(shape, tok, "cpu", dtype, vocab_size=32_000)
        be = HFBackend(model, tok, "m", prefix_cache_tokens=4096)
        card.reset_peak()
        (_, ss), = be.generate_and_sample_many([prompt], generate=dict(max_new_tokens=8),
                                               sample=Sampling(k=6, max_new_tokens=10, seed=1))
        got = {"peak": card.peak_allocated, "weights": card.live["weights"], "predicted": dict(card.predicted),
               "predicted_live": dict(card.predicted_live)}
    assert {len(s.all_token_ids) for s in ss.samples} == {10}      # the same work at both widths
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
def test_a_run_at_one_width_predicts_the_peak_at_another(tok, dtype, monkeypatch):
    for name, spec in WIDTHS.items():
        monkeypatch.setitem(rl.SHAPES, name, spec)
    a = _seakr_step("A", tok, dtype, {"A": "A", "B": "B"})
    b = _seakr_step("B", tok, dtype, {"A": "A", "B": "B"})
    assert a["peak"] < b["peak"]
    # the prediction is of the live tensors' bytes: each width's own is its peak of them
    assert a["predicted"]["A"] <= a["peak"] <= a["predicted"]["A"] * 1.01
    assert a["predicted"]["B"] == pytest.approx(b["predicted"]["B"], rel=1e-4)
    assert b["predicted"]["A"] == pytest.approx(a["predicted"]["A"], rel=1e-4)
    # at the predicted peak the weights are the other width's model's
    assert a["predicted_live"]["B"]["weights"] == pytest.approx(b["weights"], rel=1e-4)


def test_a_model_leaving_the_card_starts_the_peak_over(tok):
    card = SimulatedCard()
    with card:
        model = rl.random_llama("tiny", tok, "cpu", torch.float32, vocab_size=32_000)
        weights = card.allocated
        assert card.live["weights"] > 0 and card.peak_allocated == weights <= card.reserved
        del model
        assert card.allocated == card.peak_allocated == card.reserved == card.peak == 0


def test_the_committed_predictions_hold_7bs_weights_and_add_up():
    import json

    from seakr_repro.card_check.peak_prediction import PREDICTIONS

    doc = json.loads(PREDICTIONS.read_text())
    seen = 0
    for profile, methods in doc["profiles"].items():
        for method, by_dtype in methods.items():
            for dtype, got in by_dtype.items():
                per_value = {"float16": 2, "float32": 4}[dtype]
                weights = Dims.shape(rl.SHAPES["llama-2-7b"], 32_000, per_value).weight_bytes()
                assert got["predicted_by_kind"]["weights"] >= weights, (profile, method, dtype)
                assert got["predicted_peak_bytes"] == pytest.approx(sum(got["predicted_by_kind"].values()), abs=16)
                seen += 1
    assert seen >= 10 and {"paper-tiny", "paper"} <= set(doc["profiles"])


def test_the_check_reports_a_prediction_beside_each_peak(tok):
    from seakr_repro.doubles import simulated_card
    from seakr_repro.card_check.peak_prediction import peak_fields, predicted

    committed = predicted("paper-tiny", "seakr", "float16")
    got = peak_fields("paper-tiny", "seakr", "float16")
    assert got["peak_bytes"] == committed["predicted_peak_bytes"] and committed["commit"] in got["from"]
    assert "no prediction" in peak_fields("paper-tiny", "seakr", "bfloat16")["why"]
    card = simulated_card.activate(SimulatedCard(predict={"llama-2-7b": "llama-2-7b"}))
    try:
        model = rl.random_llama("tiny", tok, "cpu", torch.float32)             # 2 layers, not 32
        assert card.peak > 0 and "layer count" in peak_fields("paper-tiny", "seakr", "float32")["why"]
    finally:
        simulated_card.deactivate()
    assert model is not None
