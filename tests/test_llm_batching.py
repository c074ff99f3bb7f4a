"""ThreadBatcher: the calls of concurrent question threads become one generate_many/sample_many
call on the transformers backend, and SeaKR's results do not change with runner.concurrency."""
from __future__ import annotations

import threading

import pytest
import torch

from seakr_repro.data.records import QuestionRecord
from seakr_repro.llm.base import Generation, SampleSet, unwrap
from seakr_repro.llm.batching import ThreadBatcher, find_batcher, worker
from seakr_repro.llm.sampling_settings import Sampling

from fakes import FakeSearcher, hit


class Recording:
    """Answers every prompt with its upper-case text; logs the calls it receives."""

    name, n_layers, hidden_size, eos_token_id = "rec", 2, 4, 0

    def __init__(self, fail_on: str | None = None):
        self.calls: list[tuple[str, list[str], dict]] = []
        self.fail_on = fail_on

    def generate(self, prompt, **kw):
        self.calls.append(("generate", [prompt], kw))
        return Generation(text=prompt.upper())

    def generate_many(self, prompts, **kw):
        self.calls.append(("generate_many", list(prompts), kw))
        if self.fail_on in prompts:
            raise RuntimeError("boom")
        return [Generation(text=p.upper()) for p in prompts]

    def sample_many(self, prompts, settings):
        self.calls.append(("sample_many", list(prompts), settings))
        import numpy as np
        return [SampleSet([Generation(text=p)], np.zeros((1, 4), np.float32), 1, "mlp_out") for p in prompts]


def _together(n: int, fn) -> list:
    """fn(i) on n registered threads that all register before any of them calls."""
    barrier, out, errors = threading.Barrier(n), [None] * n, [None] * n

    def body(i):
        with worker(batcher):
            barrier.wait()
            try:
                out[i] = fn(i)
            except BaseException as e:   # noqa: BLE001 - checked by the test
                errors[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a thread never got its result"
    return out, errors


batcher: ThreadBatcher   # set by each test before _together runs


def test_calls_of_waiting_threads_become_one_batch_and_each_gets_its_own_part():
    global batcher
    inner = Recording()
    batcher = ThreadBatcher(inner)
    out, errors = _together(3, lambda i: batcher.generate_many([f"q{i}a", f"q{i}b"], max_new_tokens=4,
                                                                  stop=["\n"]))
    assert errors == [None] * 3
    assert [[g.text for g in gens] for gens in out] == [[f"Q{i}A", f"Q{i}B"] for i in range(3)]
    assert len(inner.calls) == 1 and sorted(inner.calls[0][1]) == sorted(
        f"q{i}{s}" for i in range(3) for s in "ab")
    assert inner.calls[0][2] == {"max_new_tokens": 4, "stop": ("\n",), "want_stats": False}


def test_greedy_steps_with_their_samples_from_several_threads_are_one_call():
    """SeaKR's step + U (generate_and_sample_many) of several threads: one call on the backend,
    which lacks the method here, so base.generate_and_sample_many makes it the two batched calls."""
    global batcher
    inner = Recording()
    batcher = ThreadBatcher(inner)
    gen, smp = dict(max_new_tokens=4, stop=["\n"]), Sampling(k=1, max_new_tokens=3, stop=[". "])
    out, errors = _together(3, lambda i: batcher.generate_and_sample_many(
        [f"q{i}"], generate=gen, sample=smp))
    assert errors == [None] * 3
    assert [[(g.text, ss.samples[0].text) for g, ss in pairs] for pairs in out] == [
        [(f"Q{i}", f"q{i}")] for i in range(3)]
    assert [c[0] for c in inner.calls] == ["generate_many", "sample_many"]
    assert sorted(inner.calls[0][1]) == ["q0", "q1", "q2"] == sorted(inner.calls[1][1])
    assert batcher.batches == 1 and batcher.batched_requests == 3


def test_step_calls_with_different_stops_still_share_one_batch():
    """Each prompt of a generate_and_sample_many call carries its own settings, so the batcher
    merges such calls whatever their stops; the model backend gets them per prompt."""
    global batcher

    class PerPrompt(Recording):
        def generate_and_sample_many(self, prompts, *, generate, sample):
            self.calls.append(("both", list(prompts), {"generate": generate, "sample": sample}))
            return list(zip(self.generate_many(prompts), self.sample_many(prompts, sample[0])))

    inner = PerPrompt()
    batcher = ThreadBatcher(inner)
    out, errors = _together(3, lambda i: batcher.generate_and_sample_many(
        [f"q{i}"], generate=dict(max_new_tokens=4, stop=[f"s{i}"]), sample=Sampling(k=1, max_new_tokens=3)))
    assert errors == [None] * 3 and [pairs[0][0].text for pairs in out] == ["Q0", "Q1", "Q2"]
    both = [c for c in inner.calls if c[0] == "both"]
    assert len(both) == 1 and batcher.batches == 1
    stops = {p: g["stop"] for p, g in zip(both[0][1], both[0][2]["generate"])}
    assert stops == {"q0": ["s0"], "q1": ["s1"], "q2": ["s2"]}


def test_different_settings_go_in_separate_calls_and_attention_runs_alone():
    global batcher
    inner = Recording()
    batcher = ThreadBatcher(inner)

    def call(i):
        if i == 2:
            return batcher.generate("att", max_new_tokens=4, want_attention=True).text
        if i == 3:
            return batcher.sample_many(["s"], Sampling(k=2, max_new_tokens=3, stop=["."]))[0].samples[0].text
        return batcher.generate(f"g{i}", max_new_tokens=4 + i).text   # two settings

    out, errors = _together(4, call)
    assert errors == [None] * 4 and out == ["G0", "G1", "ATT", "s"]
    kinds = sorted((kind, tuple(prompts)) for kind, prompts, _ in inner.calls)
    assert kinds == [("generate", ("att",)), ("generate_many", ("g0",)), ("generate_many", ("g1",)),
                     ("sample_many", ("s",))]


def test_an_error_reaches_every_caller_of_the_failed_batch():
    global batcher
    batcher = ThreadBatcher(Recording(fail_on="q1"))
    _, errors = _together(3, lambda i: batcher.generate(f"q{i}", max_new_tokens=2))
    assert all(isinstance(e, RuntimeError) for e in errors)


def test_a_thread_outside_any_worker_scope_is_served_at_once():
    inner = Recording()
    b = ThreadBatcher(inner)
    assert b.generate("x", max_new_tokens=1).text == "X" and len(inner.calls) == 1
    assert b.name == "rec" and unwrap(b) is inner and find_batcher(b) is b


# -- SeaKR on the real default model: the same results one at a time and two at a time ---------
DOCS = [hit("d1", "Plato was born in Athens around 428 BC."),
        hit("d2", "Aristotle was born in Stagira in 384 BC."),
        hit("d3", "Socrates taught Plato in Athens.")]
QUESTIONS = [QuestionRecord(id=f"q{i}", question=q, answers=[a]) for i, (q, a) in enumerate([
    ("Who was born first, Aristotle or Plato?", "Plato"),
    ("Where was Aristotle born?", "Stagira"),
])]
SMALL = dict(k=4, sample_max_tokens=8, max_new_tokens=12, n_shot=2, max_reasoning_steps=1,
             max_docs=1, delta=-100.0)   # delta below every U: every step retrieves and re-ranks


@pytest.fixture(scope="module")
def smollm():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir

    torch.set_num_threads(1)
    return HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")


def test_seakr_gives_the_same_answers_and_u_with_questions_side_by_side(smollm, tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    from seakr_repro.methods import build_method
    from seakr_repro.runs.runner import run_method

    def run(concurrency, backend):
        cached = CachedBackend(backend, root=tmp_path / f"c{concurrency}", enabled=False)
        method = build_method("seakr", cached, FakeSearcher(DOCS), "bundled-2wiki", **SMALL)
        backend.reset_prefix_cache()     # both runs start cold
        rows = run_method(method, QUESTIONS, tmp_path / f"r{concurrency}.jsonl", backend=cached,
                          progress=False, concurrency=concurrency)
        return {r["id"]: r for r in rows}

    alone = run(1, smollm)
    batched = ThreadBatcher(smollm)
    side_by_side = run(len(QUESTIONS), batched)
    assert batched.batched_requests > batched.batches, "no call of two questions was merged"
    for qid, want in alone.items():
        got = side_by_side[qid]
        assert got["answer"] == want["answer"]
        assert got["llm_calls"] == want["llm_calls"]           # counted on the question's own row
        us = lambda row: [t.get("u") for t in row["trace"]]   # noqa: E731
        assert [t.get("output") for t in got["trace"]] == [t.get("output") for t in want["trace"]]
        assert us(got) == pytest.approx(us(want), abs=1e-4)
