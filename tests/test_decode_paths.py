"""The transformers backend's jobs apart: decode paths as strategies behind one interface (their names
in core, which the settings schema reads), the out-of-memory retry as one mechanism,
the prefix cache as its own class. Fast: a tiny random LLaMA, or no model at all."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.llm.hf.decode import paths
from seakr_repro.core.setting_choices import DECODE_PATHS, DECODE_SETTINGS, resolve_decode
from seakr_repro.llm.hf.oom import OutOfMemoryRetry
from seakr_repro.llm.sampling_settings import Sampling


def test_every_decode_path_name_has_its_strategy():
    assert tuple(paths.STRATEGIES) == DECODE_PATHS
    assert all(paths.strategy(n).name == n for n in DECODE_PATHS)
    # a setting is a path or auto, which names one of them (the documented default)
    assert set(DECODE_SETTINGS) == {"auto", *DECODE_PATHS} and resolve_decode("auto") == "one_sync"
    assert all(resolve_decode(n) == n for n in DECODE_PATHS)


def test_the_decode_names_import_no_torch():
    code = ("import sys; import seakr_repro.core.setting_choices as n; "
            "assert 'torch' not in sys.modules, 'torch imported'; print(','.join(n.DECODE_PATHS))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == ",".join(DECODE_PATHS)


def test_the_settings_schema_accepts_every_decode_path_and_no_other():
    for name in DECODE_SETTINGS:
        assert load_config("smoke", {"model.decode": name})["model.decode"] == name
    with pytest.raises(UserError) as err:
        load_config("smoke", {"model.decode": "graphs"})
    assert "model.decode" in err.value.paragraph() and "'one_sync'" in err.value.paragraph()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from seakr_repro.doubles.llama_tokenizer import build_tokenizer
    from seakr_repro.doubles.random_llama import random_llama

    tok = build_tokenizer(tmp_path_factory.mktemp("tok"))
    return random_llama("tiny", tok, "cpu", torch.float32, seed=1), tok


PROMPT = "Question: Who was born first, Aristotle or Plato?\nAnswer:"


def test_a_new_decode_path_is_a_new_strategy_not_a_branch(tiny, monkeypatch):
    """A path registered under a new name runs every decode step of the backend's shared-prefix
    calls, with nothing in HFBackend changed."""
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.hf.decode.one_sync import OneSync

    class Probe(OneSync):
        name = "probe"
        draws = 0

        def draw(self, batch, logits):
            Probe.draws += 1
            return super().draw(batch, logits)

    monkeypatch.setitem(paths.STRATEGIES, "probe", Probe())
    model, tok = tiny
    be = HFBackend(model, tok, "tiny")
    want = be.sample(PROMPT, Sampling(k=3, max_new_tokens=5, seed=2))
    be.decode_path = "probe"
    got = be.sample(PROMPT, Sampling(k=3, max_new_tokens=5, seed=2))
    assert Probe.draws >= 1
    assert [s.token_ids for s in got.samples] == [s.token_ids for s in want.samples]


def test_the_forward_entry_point_sees_every_prefill_and_decode_pass(tiny):
    from seakr_repro.llm.hf.backend import HFBackend

    model, tok = tiny
    be = HFBackend(model, tok, "tiny", prefix_cache_tokens=0)
    widths = []
    real = be.forward
    be.forward = lambda ids, cache=None, position_ids=None: widths.append(ids.shape) or real(ids, cache, position_ids)
    be.sample(PROMPT, Sampling(k=4, max_new_tokens=3, seed=1))
    n_prompt = be.count_tokens(PROMPT)
    assert widths[0] == (1, n_prompt)                       # the pre-fill
    assert widths[1:] == [(4, 1), (4, 1)]                   # two decode steps of the four rows


def _oom():
    raise torch.OutOfMemoryError("injected")


def test_out_of_memory_halves_the_widest_pass_and_gives_up_at_one_row():
    freed = []
    retry = OutOfMemoryRetry("m", lambda: freed.append(1))
    calls = []

    def fn():
        retry.note_rows(retry.rows_per_forward or 8)
        calls.append(retry.rows_per_forward)
        if (retry.rows_per_forward or 8) > 2:
            _oom()
        return "done"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert retry.run(fn) == "done"
    assert calls == [None, 4, 2] and retry.rows_per_forward == 2
    assert retry.retries == 2 and len(freed) == 2 and retry.seconds > 0
    assert "out of memory with 8 rows in one pass; retrying with 4" in str(w[0].message)

    def never():
        retry.note_rows(1)
        _oom()
    with pytest.raises(torch.OutOfMemoryError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        retry.run(never)
    assert retry.rows_per_forward == 1


def test_out_of_memory_in_a_batch_of_contexts_halves_the_contexts():
    retry = OutOfMemoryRetry("m", lambda: None)
    seen = []

    def fn(batch):
        seen.append(len(batch))
        if len(batch) > 1:
            _oom()
        return [x * 10 for x in batch]
    with pytest.warns(UserWarning, match="3 contexts in one batch; retrying with 1"):
        assert retry.by_contexts(fn, [1, 2, 3]) == [10, 20, 30]
    assert seen == [3, 1, 1, 1] and retry.contexts_per_batch == 1 and retry.retries == 1


def test_the_prefix_cache_reuses_chunk_boundaries_with_the_same_bits(tiny):
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.hf.prefix_cache import PREFILL_CHUNK

    model, tok = tiny
    be = HFBackend(model, tok, "tiny")
    ids = tok(" ".join(["Aristotle was born in Stagira."] * 30))["input_ids"]
    assert len(ids) > 3 * PREFILL_CHUNK
    be.prefill(ids)
    hits = be.prefix_hits
    part = ids[:2 * PREFILL_CHUNK + 5]                  # starts with a kept boundary
    again = be.prefill(part)
    assert be.prefix_hits == hits + 1
    cold = HFBackend(model, tok, "cold", prefix_cache_tokens=0).prefill(part)
    torch.testing.assert_close(again[1], cold[1], rtol=0, atol=0)
    be.reset_prefix_cache()
    assert len(be.prefixes) == 0


def test_the_prefix_cache_drops_the_least_recently_used_beyond_its_bound():
    from seakr_repro.llm.hf.prefix_cache import PrefixCache, _ids_key

    pc = PrefixCache(300)
    pc.remember(list(range(128)), ["a"])
    pc.remember(list(range(1, 129)), ["b"])
    assert pc._get(_ids_key(range(128))) is not None       # "a" used last
    pc.remember(list(range(100)), ["c"])                    # 356 tokens: the oldest use goes
    assert pc._get(_ids_key(range(1, 129))) is None and len(pc) == 2
    assert PrefixCache(0).remember(list(range(5)), ["d"]) is None and len(PrefixCache(0)) == 0
