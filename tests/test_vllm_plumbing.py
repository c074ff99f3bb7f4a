"""The vLLM backend's plumbing that does not need vLLM: settings, errors, the engine thread.

The engine thread is driven here by a scripted engine with vLLM's interface (enqueue, step,
collective_rpc), so continuous batching and error hand-back are tested on every machine;
tests/test_vllm_backend.py checks the real engine where vLLM is installed.
"""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from seakr_repro.core.config import load_config
from seakr_repro.core.errors import UserError
from seakr_repro.llm import registry
from seakr_repro.llm.stops import cut_at_stop, find_stop
from seakr_repro.llm.vllm.backend import VLLMBackend, _tensor_parallel, vllm_available
from seakr_repro.llm.vllm.engine import EngineThread


class ScriptedEngine:
    """Finishes each request `steps` engine steps after it was added; records batch sizes."""

    def __init__(self, steps=3, fail_on=None):
        self.steps, self.fail_on = steps, fail_on
        self.counter = 0
        self.live: dict[str, list] = {}
        self.batch_sizes: list[int] = []
        self.llm_engine = SimpleNamespace(step=self.step, abort_request=lambda ids, internal: None,
                                          output_processor=SimpleNamespace(request_states={}))

    def enqueue(self, prompts, params, use_tqdm=False):
        ids = []
        for p in prompts:
            if p == self.fail_on:
                raise ValueError("refused prompt")
            rid = str(self.counter)
            self.counter += 1
            self.live[rid] = [self.steps, p]
            ids.append(f"{rid}-abcd1234")
        return ids

    def step(self):
        time.sleep(0.001)            # a real step takes time; lets other callers join the batch
        self.batch_sizes.append(len(self.live))
        out = []
        for rid in list(self.live):
            self.live[rid][0] -= 1
            if self.live[rid][0] == 0:
                out.append(SimpleNamespace(request_id=rid, finished=True, prompt=self.live.pop(rid)[1]))
        return out

    def collective_rpc(self, fn, args=()):
        return [{tag: {"seen": True} for tag in args[0]}]


def test_engine_thread_batches_callers_and_routes_results():
    eng = ScriptedEngine(steps=5)
    et = EngineThread(eng)
    results = {}
    start = threading.Barrier(4)

    def work(i):
        start.wait()
        results[i] = et.run([f"p{i}a", f"p{i}b"], [None, None], [f"t{i}", None])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for i in range(4):
        (a, cap_a), (b, cap_b) = results[i]
        assert (a.prompt, b.prompt) == (f"p{i}a", f"p{i}b")      # each caller gets its own
        assert cap_a == {"seen": True} and cap_b == {}
    assert max(eng.batch_sizes) > 2          # requests of different callers shared steps


def test_engine_thread_hands_errors_back_and_keeps_running():
    """A refused request fails its own caller only; requests in flight finish normally."""
    eng = ScriptedEngine(steps=500, fail_on="bad")
    et = EngineThread(eng)
    other = {}
    t = threading.Thread(target=lambda: other.update(out=et.run(["slow"], [None], [None])))
    t.start()
    while not eng.counter:         # the slow request is in the engine (0.5 s of steps)
        time.sleep(0.001)
    with pytest.raises(ValueError, match="refused"):
        et.run(["bad"], [None], [None])
    assert eng.live                # ... and still running when the refusal came back
    t.join(timeout=60)
    assert other["out"][0][0].prompt == "slow"
    (out, _), = et.run(["good"], [None], [None])
    assert out.prompt == "good"


def test_registry_builds_the_vllm_backend_from_the_profile(monkeypatch):
    seen = {}

    def fake(path, **kw):
        seen.update(kw, path=path)
        return SimpleNamespace(name=kw["name"], n_layers=30, hidden_size=576, eos_token_id=2,
                               fingerprint="vllm:x")

    monkeypatch.setattr(VLLMBackend, "from_dir", staticmethod(fake))
    cfg = load_config("default", overrides={"model.backend": "vllm", "model.device": "cpu",
                                            "model.vllm.max_model_len": 2048})
    b = registry.load_backend(cfg)
    assert b.fingerprint == "vllm:x" and b.name == "smollm2-135m-instruct"
    assert seen["max_model_len"] == 2048 and seen["tensor_parallel_size"] == "auto"
    assert seen["device"] == "cpu" and seen["dtype"] == "float32"
    with pytest.raises(UserError, match="model.backend"):
        registry.load_backend(load_config("default", overrides={"model.backend": "tgi"}))


@pytest.mark.skipif(vllm_available() is None, reason="vLLM is installed here")
def test_missing_vllm_is_a_clear_error():
    cfg = load_config("default", overrides={"model.backend": "vllm", "model.device": "cpu"})
    with pytest.raises(UserError) as err:
        registry.load_backend(cfg)
    assert "setup-vllm" in str(err.value) and "model.backend" in str(err.value)


def test_tensor_parallel_setting():
    assert _tensor_parallel("auto", "cpu") == 1
    assert _tensor_parallel(2, "cuda") == 2
    with pytest.raises(UserError, match="tensor_parallel_size"):
        _tensor_parallel("two", "cuda")


def test_stop_cut_keeps_whole_tokens_before_the_stop():
    assert find_stop("Paris is. So", [". ", "\n"]) == 8
    assert cut_at_stop(["Paris", " is", ".", " So"], [". "]) == ("Paris is", 2)
    assert cut_at_stop(["Paris", " is"], [". "]) == ("Paris is", 2)
    assert cut_at_stop([" Paris", " is.", " So"], [". "]) == (" Paris is", 1)   # a token across it
    # the first byte of "é" (decoded "" until complete) goes with its character, after the cut
    assert cut_at_stop([" Caf", "", "é", ". So"], ["\u00e9. "]) == (" Caf", 1)


def test_kbae_row_is_skipped_with_the_reason_on_the_vllm_backend(tmp_path):
    from seakr_repro.llm.cache import CachedBackend
    from seakr_repro.methods.taikc.kbae import kbae_unavailable

    class V:
        name, n_layers, hidden_size, eos_token_id, kind = "v", 2, 4, 0, "vllm"

    class H:
        name, n_layers, hidden_size, eos_token_id = "h", 2, 4, 0

        def __init__(self):
            self.model, self.tokenizer = object(), object()

    why = kbae_unavailable(CachedBackend(V(), root=tmp_path, enabled=False))
    assert "transformers backend" in why and "model.backend: vllm" in why
    assert kbae_unavailable(CachedBackend(H(), root=tmp_path, enabled=False)) is None


def test_vllm_runs_and_extractions_are_kept_apart_from_transformers_ones(tmp_path):
    """Same profile, other backend: other run files and step-02 folder, so a vLLM run never
    resumes (and mixes into) a transformers run; transformers keys stay as they were."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fakes import FakeBackend, FakeSearcher

    from seakr_repro.steps.extraction import extraction_dir
    from seakr_repro.llm.cache import CachedBackend
    from seakr_repro.methods import build_method

    class VllmLike(FakeBackend):
        kind = "vllm"

    hf = build_method("cot", CachedBackend(FakeBackend(lambda p, s: "x"), root=tmp_path),
                      FakeSearcher([]), "bundled-2wiki")
    vl = build_method("cot", CachedBackend(VllmLike(lambda p, s: "x"), root=tmp_path),
                      FakeSearcher([]), "bundled-2wiki")
    assert "backend" not in hf.config and vl.config["backend"] == "vllm"
    assert {k: v for k, v in vl.config.items() if k != "backend"} == hf.config
    a = extraction_dir(load_config("smoke"))
    b = extraction_dir(load_config("smoke", overrides={"model.backend": "vllm"}))
    assert a.name == "02-extract-hidden-states" and b.name == "02-extract-hidden-states-vllm"


def test_close_stops_the_engine_thread_and_shuts_the_engine_down():
    eng = ScriptedEngine(steps=2)
    calls = []
    eng.shutdown = lambda: calls.append("shutdown")
    b = VLLMBackend.__new__(VLLMBackend)
    b.llm, b._engine = eng, EngineThread(eng)
    (out, _), = b._engine.run(["a"], [None], [None])
    thread = b._engine.thread
    b.close()
    assert calls == ["shutdown"] and not thread.is_alive() and b.llm is None
    b.close()                                  # twice is harmless
    assert calls == ["shutdown"]
