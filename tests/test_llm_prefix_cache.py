"""Prefix reuse in the transformers backend: same bits with or without it, and it is really used."""
import numpy as np
import pytest
import torch

from seakr_repro.prompts import demos_for
from seakr_repro.prompts.seakr import build_prompt, stop_strings
from seakr_repro.llm.sampling_settings import Sampling

ARGS = dict(k=3, max_new_tokens=8, stop=stop_strings(False, False), seed=11, layer=5)


@pytest.fixture(scope="module")
def backends():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir

    torch.set_num_threads(1)
    path = model_dir("smollm2-135m-instruct")
    with_reuse = HFBackend.from_dir(path, name="smollm2-135m-instruct")
    without = HFBackend(with_reuse.model, with_reuse.tokenizer, "smollm2-135m-instruct",
                        prefix_cache_tokens=0)
    return with_reuse, without


def prompts():
    demos = demos_for("bundled-2wiki", 4)          # ~400 tokens of shared demonstrations
    return [build_prompt(demos, "Who was born first, Aristotle or Plato?"),
            build_prompt(demos, "Where did Abraham Lincoln die?", docs=["Lincoln died in Washington."])]


def test_reused_prefix_gives_identical_samples_and_vectors(backends):
    reuse, plain = backends
    p1, p2 = prompts()
    assert reuse.count_tokens(p1) > 300
    first = reuse.sample(p1, Sampling(**ARGS))
    hits_before = reuse.prefix_hits
    second = reuse.sample(p2, Sampling(**ARGS))              # shares the demos with p1
    assert reuse.prefix_hits > hits_before, "the shared demonstrations were not reused"
    for got, prompt in ((first, p1), (second, p2)):
        ref = plain.sample(prompt, Sampling(**ARGS))
        assert [s.token_ids for s in got.samples] == [s.token_ids for s in ref.samples]
        np.testing.assert_array_equal(got.vectors, ref.vectors)


def test_greedy_with_reuse_matches_hf_generate(backends):
    reuse, _ = backends
    p1, _ = prompts()
    reuse.generate(p1, max_new_tokens=4)             # fills the prefix cache
    ours = reuse.generate(p1, max_new_tokens=10)     # now mostly from the cache
    ids = torch.tensor([reuse._encode(p1)])
    ref = reuse.model.generate(ids, max_new_tokens=10, do_sample=False)[0, ids.shape[1]:].tolist()
    ref = ref[:ref.index(reuse.eos_token_id)] if reuse.eos_token_id in ref else ref
    assert ours.token_ids == ref[:len(ours.token_ids)] and len(ours.token_ids) > 0


def test_a_whole_prompt_seen_before_is_not_prefilled_again_and_stays_pristine(backends):
    """SeaKR's greedy step, its k samples and the forced-EOS pass start from one context: the
    second pre-fill of it runs no forward pass, and the first call's decoding (which appends to
    its cache) does not leak into what the next call reuses."""
    reuse, plain = backends
    _, p2 = prompts()
    reuse.generate(p2, max_new_tokens=6)             # decodes on top of p2's cache
    calls = []
    forward = reuse.forward
    reuse.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    try:
        reuse.prefill(reuse._encode(p2))
        assert calls == []
    finally:
        del reuse.forward
    got, ref = reuse.sample(p2, Sampling(**ARGS)), plain.sample(p2, Sampling(**ARGS))
    assert [s.token_ids for s in got.samples] == [s.token_ids for s in ref.samples]
    np.testing.assert_array_equal(got.vectors, ref.vectors)
