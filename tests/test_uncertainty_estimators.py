import math

import numpy as np
import pytest

from seakr_repro.core.errors import UserError
from seakr_repro.llm.base import Generation
from seakr_repro.uncertainty import (
    build_prompt,
    content_logprobs,
    eigen_score,
    energy,
    judge,
    ln_entropy,
    multi_perplexity,
    oriented,
    perplexity,
    prompt_uncertainty,
)


def test_perplexity_and_eos_exclusion():
    lp = [math.log(0.5), math.log(0.25)]
    assert perplexity(lp) == pytest.approx(math.sqrt(8))       # exp(-(ln .5 + ln .25)/2)
    g = Generation("a b", token_ids=[5, 6, 2], logprobs=lp + [math.log(0.01)])
    assert content_logprobs(g, eos_token_id=2) == lp
    assert perplexity(content_logprobs(g, 2)) == pytest.approx(math.sqrt(8))
    assert perplexity([]) == math.inf


def test_multi_perplexity_and_true_ln_entropy():
    samples = [[math.log(0.5)] * 2, [math.log(0.25)], []]     # the empty sample is skipped
    assert multi_perplexity(samples) == pytest.approx((2 + 4) / 2)
    # Malinin & Gales: -(1/k) sum_i (1/T_i) sum_t log p = (ln 2 + ln 4) / 2
    assert ln_entropy(samples) == pytest.approx((math.log(2) + math.log(4)) / 2)
    assert multi_perplexity([[], []]) == math.inf and ln_entropy([]) == math.inf


def test_energy_sign_and_orientation():
    confident, unsure = [12.0, 14.0], [3.0, 5.0]
    assert energy(confident) == 13.0 and energy(unsure) == 4.0
    assert energy.higher_is_more_uncertain is False
    assert oriented(energy(unsure), energy) > oriented(energy(confident), energy)
    assert energy([]) == -math.inf and oriented(energy([]), energy) == math.inf
    np.testing.assert_array_equal(oriented(np.array([1.0, 2.0]), False), [-1.0, -2.0])
    for f in (perplexity, multi_perplexity, ln_entropy, eigen_score,
              prompt_uncertainty):
        assert f.higher_is_more_uncertain is True
    with pytest.raises(UserError):
        oriented(1.0, print)
    with pytest.raises(UserError, match="NaN"):
        perplexity([float("nan")])


class ScriptedBackend:
    """Returns canned replies in order and records the prompts it saw."""
    name, n_layers, hidden_size, eos_token_id = "fake", 2, 4, 0

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def generate(self, prompt, *, max_new_tokens, stop=(), want_stats=False,
                 want_attention=False):
        self.prompts.append(prompt)
        tokens, lps = self.replies.pop(0)
        return Generation("".join(tokens), tokens=tokens, logprobs=lps)


def test_prompt_estimator_with_scripted_backend():
    be = ScriptedBackend([([" Yes", "."], [math.log(0.9), -0.1]),
                          (["\n", " No"], [-0.2, math.log(0.7)]),
                          ([" Y", "es"], [math.log(0.5), math.log(0.8)]),
                          ([" I", " think", " no"], [-1.0, -1.0, -1.0]),
                          ([" Maybe"], [-0.5])])
    out = [prompt_uncertainty(be, "Who wrote Hamlet?", context="[1] doc") for _ in range(5)]
    assert out[0].answer == "yes" and out[0].uncertainty == pytest.approx(0.1)
    assert out[1].answer == "no" and out[1].uncertainty == pytest.approx(0.7)
    assert out[2].p_answer == pytest.approx(0.4) and out[2].uncertainty == pytest.approx(0.6)
    assert out[3].answer == "no" and out[3].uncertainty == 1.0 and out[3].p_answer is None
    assert out[4].answer is None and out[4].uncertainty == 1.0
    assert be.prompts[0] == build_prompt("Who wrote Hamlet?", "[1] doc")
    assert be.prompts[0].startswith("[1] doc\nQuestion: Who wrote Hamlet?\n")
    assert "sufficient knowledge" in be.prompts[0] and be.prompts[0].endswith("Answer:")


def test_judge_does_not_read_yesterday_as_yes():
    j = judge("Yesterday I knew", ["Yesterday", " I"], [-0.1, -0.1])
    assert j.answer is None and j.uncertainty == 1.0
