"""The runner never loses or duplicates a question: kill it mid-run, resume, compare."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field

import pytest

from seakr_repro.core.errors import UserError
from seakr_repro.runs.runner import read_results, run_method, summarise


@dataclass
class Rec:
    id: str
    question: str
    golds: list
    type: str = "t"


@dataclass
class Result:
    answer: str
    raw_output: str = ""
    trace: list = field(default_factory=list)
    n_retrievals: int = 1
    extra: dict = field(default_factory=dict)


class EchoMethod:
    name = "echo"

    def __init__(self, delay=0.0):
        self.delay, self.calls = delay, []

    def run(self, record):
        self.calls.append(record.id)
        time.sleep(self.delay)
        return Result(answer=record.golds[0])


class ConcurrentBackend:
    """A backend that says it batches concurrent calls (and makes none here)."""
    concurrent = True

    def stats(self):
        return {}


def scorer(pred, golds):
    return {"em": float(pred in golds), "f1": float(pred in golds)}


RECORDS = [Rec(f"q{i:02d}", f"question {i}", [f"answer {i}"]) for i in range(20)]

CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_runner import RECORDS, EchoMethod, scorer
    from seakr_repro.runs.runner import run_method
    run_method(EchoMethod(delay=0.15), RECORDS, {out!r}, scorer=scorer, progress=False)
""")


def test_resume_after_kill_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "run.jsonl"
    code = CHILD.format(tests=os.path.dirname(__file__), out=str(out))
    child = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    while time.time() < deadline:
        if out.exists() and len(read_results(out)) >= 5:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    finished_before = [r["id"] for r in read_results(out)]
    assert 5 <= len(finished_before) < len(RECORDS), "the kill must land mid-run"

    method = EchoMethod()
    rows = run_method(method, RECORDS, out, scorer=scorer, progress=False)
    assert method.calls == [r.id for r in RECORDS if r.id not in finished_before]
    ids = [r["id"] for r in read_results(out)]
    assert sorted(ids) == sorted(r.id for r in RECORDS) and len(ids) == len(set(ids))
    assert [r["id"] for r in rows] == ids
    assert summarise(rows)["em"] == 100.0


def test_torn_last_line_is_cut_and_rerun(tmp_path):
    out = tmp_path / "run.jsonl"
    run_method(EchoMethod(), RECORDS[:3], out, scorer=scorer, progress=False)
    with open(out, "a") as fh:
        fh.write('{"id": "q03", "answ')           # a kill in the middle of a write
    method = EchoMethod()
    run_method(method, RECORDS[:5], out, scorer=scorer, progress=False)
    assert method.calls == ["q03", "q04"]
    assert [r["id"] for r in read_results(out)] == ["q00", "q01", "q02", "q03", "q04"]


def test_malformed_line_in_the_middle_names_the_line(tmp_path):
    out = tmp_path / "run.jsonl"
    run_method(EchoMethod(), RECORDS[:3], out, scorer=scorer, progress=False)
    lines = out.read_text().splitlines()
    lines[1] = "not json"
    out.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        run_method(EchoMethod(), RECORDS[:4], out, scorer=scorer, progress=False)
    assert "line 2" in str(err.value) and str(out) in str(err.value)


def test_rows_carry_costs_from_backend_counters(tmp_path):
    class CountingBackend:
        def __init__(self):
            self.n = 0

        def stats(self):
            return {"llm_calls": self.n, "generated_tokens": 10 * self.n, "cache_hits": 0,
                    "prompt_tokens": 100 * self.n}

    backend = CountingBackend()

    class Calling(EchoMethod):
        def run(self, record):
            backend.n += 3
            return super().run(record)

    rows = run_method(Calling(), RECORDS[:2], tmp_path / "r.jsonl", backend=backend, scorer=scorer,
                      progress=False)
    assert [r["llm_calls"] for r in rows] == [3, 3] and rows[0]["tokens"] == 30
    assert rows[1]["prompt_tokens"] == 300
    assert json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])["id"] == "q00"


def test_concurrent_questions_count_their_own_calls_and_resume(tmp_path):
    """runner.concurrency > 1: questions overlap, each row carries its own calls (the CachedBackend
    counts per question through a context scope), and a resumed run skips finished ids."""
    import threading

    from seakr_repro.llm.base import Generation
    from seakr_repro.llm.cache import CachedBackend

    class SlowBackend:
        name, n_layers, hidden_size, eos_token_id = "slow", 2, 4, 0
        concurrent = True

        def __init__(self):
            self.active = self.peak = 0
            self.lock = threading.Lock()

        def generate(self, prompt, **kw):
            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
            time.sleep(0.05)
            with self.lock:
                self.active -= 1
            return Generation(text=prompt, token_ids=[1, 2], n_prompt_tokens=5)

    inner = SlowBackend()
    backend = CachedBackend(inner, root=tmp_path / "cache", enabled=False)

    class Calls(EchoMethod):
        def run(self, record):
            n = int(record.id[1:]) % 3 + 1          # q00 -> 1 call, q01 -> 2, q02 -> 3, ...
            for j in range(n):
                backend.generate(f"{record.id}/{j}", max_new_tokens=2)
            return super().run(record)

    out = tmp_path / "r.jsonl"
    rows = run_method(Calls(), RECORDS[:6], out, backend=backend, scorer=scorer, progress=False,
                      concurrency=3)
    assert inner.peak > 1                                    # questions really overlapped
    by_id = {r["id"]: r for r in rows}
    assert [by_id[f"q{i:02d}"]["llm_calls"] for i in range(6)] == [1, 2, 3, 1, 2, 3]
    assert by_id["q02"]["tokens"] == 6 and by_id["q02"]["prompt_tokens"] == 15
    assert backend.stats()["llm_calls"] == 12
    again = run_method(Calls(), RECORDS[:8], out, backend=backend, scorer=scorer, progress=False,
                       concurrency=3)
    assert sorted(r["id"] for r in again) == [f"q{i:02d}" for i in range(8)]
    assert len(out.read_text().splitlines()) == 8


def test_concurrency_needs_a_batching_backend(tmp_path):
    class Sequential:
        def stats(self):
            return {}

    with pytest.raises(UserError, match="runner.concurrency"):
        run_method(EchoMethod(), RECORDS[:2], tmp_path / "r.jsonl", backend=Sequential(),
                   scorer=scorer, progress=False, concurrency=2)


def test_an_error_in_one_concurrent_question_keeps_the_others(tmp_path):
    class Failing(EchoMethod):
        def run(self, record):
            if record.id == "q01":
                raise RuntimeError("boom")
            time.sleep(0.02)
            return super().run(record)

    out = tmp_path / "r.jsonl"
    with pytest.raises(RuntimeError, match="boom"):
        run_method(Failing(), RECORDS[:4], out, backend=ConcurrentBackend(), scorer=scorer,
                   progress=False, concurrency=2)
    written = {json.loads(x)["id"] for x in out.read_text().splitlines()}
    assert "q01" not in written and "q00" in written


def test_a_method_that_answers_one_question_at_a_time_refuses_concurrency(tmp_path):
    class Alone(EchoMethod):
        one_question_at_a_time = "it drives the model itself"

    with pytest.raises(UserError, match="drives the model itself"):
        run_method(Alone(), RECORDS[:2], tmp_path / "r.jsonl", backend=ConcurrentBackend(), scorer=scorer,
                   progress=False, concurrency=2)
    rows = run_method(Alone(), RECORDS[:2], tmp_path / "r.jsonl", backend=ConcurrentBackend(), scorer=scorer,
                      progress=False, concurrency=1)
    assert len(rows) == 2
