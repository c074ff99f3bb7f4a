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

from seakr_repro.errors import UserError
from seakr_repro.runner import read_results, run_method, summarise


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


def scorer(pred, golds):
    return {"em": float(pred in golds), "f1": float(pred in golds)}


RECORDS = [Rec(f"q{i:02d}", f"question {i}", [f"answer {i}"]) for i in range(20)]

CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_runner import RECORDS, EchoMethod, scorer
    from seakr_repro.runner import run_method
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
