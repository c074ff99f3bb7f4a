"""The card's memory outside torch, sampled in the background through a part, its child processes
included (seakr_repro/rehearsal/card_memory.py), on a CPU through a FAKE card reading: a real
child process reports its torch memory to the part's folder, the sampler reads the fake card
beside it. And a part's partial result survives its failure (child.run_part)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.rehearsal import card_memory
from seakr_repro.rehearsal.card_memory import GiB, CardReading, CardSampler
from seakr_repro.rehearsal.verdicts import judge

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from seakr_repro.rehearsal.card_memory import report_torch_reserved
    # a child process of the part whose torch holds {reserved} GiB of the card
    report_torch_reserved(Path(sys.argv[1]), reserved=lambda: int({reserved} * 2**30), interval=0.05)
    Path(sys.argv[2]).write_text("up")
    time.sleep(float(sys.argv[3]))
""")


class FakeCard:
    """The card as NVML would read it: `used` bytes in all, and each process's share."""

    def __init__(self):
        self.used, self.processes = 0, {}

    def __call__(self) -> CardReading:
        return CardReading(self.used, 80 * GiB, dict(self.processes), "fake")


def _child(tmp_path, reserved: float, seconds: float) -> subprocess.Popen:
    up = tmp_path / f"up-{reserved}"
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(reserved=reserved), str(tmp_path / "torch"), str(up),
                             str(seconds)], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    deadline = time.monotonic() + 60
    while not up.exists() or not list((tmp_path / "torch").glob(f"{proc.pid}.json")):
        assert time.monotonic() < deadline and proc.poll() is None, "the child never reported"
        time.sleep(0.05)
    return proc


def test_the_background_sampler_sees_a_childs_gpu_memory_as_torchs(tmp_path):
    """A child (think gpu_tests' pytest) holds 6 GiB of the card, all of it its torch's: nothing
    outside torch beyond the 0.5 GiB context; the part's own torch 2 GiB, read in its process."""
    card = FakeCard()
    sampler = CardSampler(card, folder=tmp_path / "torch", own_reserved=lambda: 2 * GiB, interval=0.05)
    proc = _child(tmp_path, reserved=6, seconds=30)
    try:
        card.used, card.processes = int(8.5 * GiB), {os.getpid(): int(2.5 * GiB), proc.pid: 6 * GiB}
        sampler.start()
        time.sleep(0.5)                       # the background thread samples, nobody asks it to
        assert sampler.samples >= 3
        report = sampler.report()["outside_torch_gib"]
        assert report["worst"] == 0.5 and report["reading"] == "fake"
        assert report["at_worst"]["children_torch_reserved_gib"] == {str(proc.pid): 6.0}
        assert report["at_worst"]["processes_gib"][str(proc.pid)] == 6.0
        assert report["at_worst"]["own_torch_reserved_gib"] == 2.0
    finally:
        proc.kill()
        proc.wait()
        sampler.stop()


def test_a_child_that_holds_the_card_outside_torch_fails_the_part(tmp_path):
    """A child reports 1 GiB of torch memory while the card shows it holding 13 GiB (a library
    such as JAX took the rest behind torch's back): 12 GiB outside torch, held, and the part fails."""
    card = FakeCard()
    sampler = CardSampler(card, folder=tmp_path / "torch", own_reserved=lambda: 0, interval=0.05)
    proc = _child(tmp_path, reserved=1, seconds=30)
    try:
        card.used, card.processes = 13 * GiB, {proc.pid: 13 * GiB}
        sampler.start()
        time.sleep(0.4)
        sampler.sample("after method x")
        time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
        sampler.stop()
    worst = sampler.report()["outside_torch_gib"]
    assert worst["worst"] == 12.0
    got = judge("oom", {"outcome": "returned", "retry_path_ran": True, "card": sampler.report()}, {})
    assert got["status"] == "failed" and "12.0 GiB of the card in use outside torch" in got["why"][0]


def test_a_blip_between_a_reading_and_a_childs_report_is_not_held(tmp_path):
    """A child that has just reserved 10 GiB shows outside torch until its next report: one sample
    of it is an `instant_max`, not the `worst` the verdict reads (that must hold two samples)."""
    card = FakeCard()
    sampler = CardSampler(card, folder=None, own_reserved=lambda: 4 * GiB)
    card.used = 4 * GiB
    sampler.sample("a")
    card.used = 14 * GiB                    # the part's torch grew, its own number not yet read
    sampler.own_reserved = lambda: 4 * GiB
    sampler.sample("b")
    sampler.own_reserved = lambda: 14 * GiB
    sampler.sample("c")
    got = sampler.report()["outside_torch_gib"]
    assert got["instant_max"] == 10.0 and got["instant_max_at"] == "b"
    assert got["worst"] == 0.0


def test_the_end_waits_for_the_card_to_settle(tmp_path):
    """A child (a Ray worker) freeing 13 GiB as it exits: the end sample is taken once two readings
    agree, not while the memory is still going."""
    readings = iter([14, 9, 3, 1, 1, 1] + [1] * 50)
    sampler = CardSampler(lambda: CardReading(int(next(readings) * GiB), 80 * GiB), own_reserved=lambda: 0,
                          interval=0.01)
    sampler.settle(timeout=5)
    end = sampler.report()["outside_torch_gib"]
    assert end["end"] == 1.0 and end["samples"] == 5


def test_a_dead_childs_last_report_is_not_counted(tmp_path):
    card = FakeCard()
    proc = _child(tmp_path, reserved=6, seconds=0.2)
    proc.wait()
    card.used = 1 * GiB                          # the child is gone; its report file may stay
    sampler = CardSampler(card, folder=tmp_path / "torch", own_reserved=lambda: 0)
    assert sampler.sample("x")["children"] == {}


def test_no_reading_no_samples():
    sampler = CardSampler(lambda: None)
    assert sampler.sample("x") is None and sampler.settle() is None
    got = sampler.report()
    assert got["outside_torch_gib"] is None and "no reading" in got["outside_torch_why"]


def test_join_part_reads_the_cap_and_folder_from_the_environment(tmp_path):
    """What the pytest plugin and a Ray worker's loader call: the part's folder and cap from the
    environment, a report file of this process written there."""
    code = ("import json, os, time; from seakr_repro.rehearsal.card_memory import join_part; "
            "print(json.dumps(join_part())); time.sleep(0.3); "
            "print(sorted(os.listdir(os.environ['SEAKR_REHEARSAL_TORCH_DIR'])))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT), card_memory.CAP_ENV: "24",
                              card_memory.TORCH_DIR_ENV: str(tmp_path)}, check=True).stdout.splitlines()
    cap = json.loads(out[0])
    assert cap["cap_gib"] == 24 and cap["applied"] is False      # no GPU here: nothing to cap
    assert out[1].startswith("['") and out[1].endswith(".json']")
    assert list(tmp_path.iterdir()) == []                          # gone when the process ended


# ------------------------------------------------------------------ a part's partial result
class FakeBenchmark:
    """The decode benchmark as the rehearsal uses it: it writes its timings to --out, then runs its
    checks; here a check runs out of memory."""

    @staticmethod
    def main(argv):
        out = argv[argv.index("--out") + 1]
        timings = {"floor": {"weights_ms": 4.1}, "paths": {"one_sync": {"ms_per_step": 61.0},
                                                           "fused": {"ms_per_step": 55.0}}, "checks": {}}
        with open(out, "w") as fh:
            json.dump(timings, fh)
        import torch
        raise torch.OutOfMemoryError("CUDA out of memory while building the float32 reference")


def test_decode_bench_keeps_the_benchmarks_timings_when_its_checks_fail(tmp_path, monkeypatch):
    from seakr_repro.rehearsal.child import PartRun, run_part
    from seakr_repro.rehearsal.parts import decode_bench

    monkeypatch.setattr(decode_bench, "benchmark", FakeBenchmark)
    monkeypatch.setattr(decode_bench, "tokenizer_dir", lambda work: work / "tok")
    opt = argparse.Namespace(device="cpu", shape="tiny", memory_cap_gib=24.0)
    got = run_part(PartRun("decode_bench", opt, tmp_path, 60, CardSampler(lambda: None)))
    assert got["outcome"] == "raised" and "CUDA out of memory" in got["error"]
    assert got["partial"]["paths"] == {"one_sync": {"ms_per_step": 61.0}, "fused": {"ms_per_step": 55.0}}
    judged = judge("decode_bench", got, {"device": "cuda"})
    assert judged["status"] == "failed" and "CUDA out of memory" in judged["why"][0]
    assert judged["partial"]["floor"]["weights_ms"] == 4.1


@pytest.mark.parametrize("with_partial", [True, False])
def test_a_part_that_raises_keeps_what_it_wrote(tmp_path, monkeypatch, with_partial):
    from seakr_repro.rehearsal import parts
    from seakr_repro.rehearsal.child import PartRun, run_part

    def broken(ctx):
        if with_partial:
            ctx.partial({"methods": {"cot": {"sets": {"2wiki": {"n": 1}}}}})
        raise RuntimeError("the second method broke")

    monkeypatch.setitem(parts.PARTS, "methods", parts.Part(broken))
    opt = argparse.Namespace(device="cpu", shape="tiny", memory_cap_gib=24.0)
    got = run_part(PartRun("methods", opt, tmp_path, 60, CardSampler(lambda: None)))
    assert got["outcome"] == "raised" and got["error"] == "RuntimeError: the second method broke"
    assert ("partial" in got) == with_partial


def test_per_process_the_parts_contexts_are_not_added_up_but_a_stranger_is_counted():
    """Two processes of one part (the ray part's own and its worker), each with a CUDA context of
    0.6 GiB beyond its torch: the measure is per process (0.6), not their sum; a process that is not
    the part's (no torch report) counts whole; a reading whose pids are not ours (a container) falls
    back to the card's use beyond all of the part's torch."""
    me, worker, stranger = 100, 200, 300
    reserved = {me: 2 * GiB, worker: 13 * GiB}
    two = CardReading(int(16.2 * GiB), 80 * GiB, {me: int(2.6 * GiB), worker: int(13.6 * GiB)})
    outside, basis, total = card_memory.outside_torch(two, reserved)
    assert basis == "per process" and outside == pytest.approx(0.6 * GiB, abs=2)
    assert total == pytest.approx(1.2 * GiB, abs=2)
    jax = CardReading(int(76.2 * GiB), 80 * GiB, {me: int(2.6 * GiB), worker: int(13.6 * GiB), stranger: 60 * GiB})
    assert card_memory.outside_torch(jax, reserved)[0] == 60 * GiB
    # pids hidden (a container): the card's use beyond torch, shared out among the part's two
    # processes that hold torch memory: each one's context, not their sum
    hidden = CardReading(int(16.2 * GiB), 80 * GiB, {7: int(16.2 * GiB)})
    assert card_memory.outside_torch(hidden, reserved) == (pytest.approx(0.6 * GiB, abs=2), "card",
                                                           pytest.approx(1.2 * GiB, abs=2))
    unlisted = CardReading(int(19.2 * GiB), 80 * GiB, {me: int(2.6 * GiB), worker: int(13.6 * GiB)})
    assert card_memory.outside_torch(unlisted, reserved)[0] == pytest.approx(3 * GiB, abs=2)   # no process's


# ------------------------------------------------------------------ on a simulated card
class HealthyPart:
    """A part whose process holds torch memory and a CUDA context (on the simulated card), and
    nothing else: it must read ok. `behind_torch` bytes a library takes behind torch's back."""

    def __init__(self, card, behind_torch: int = 0):
        self.card, self.behind_torch = card, behind_torch

    def __call__(self, ctx) -> dict:
        import torch

        with self.card:
            kept = torch.zeros(16 * 2**20 // 4)          # torch's memory, and with it the context
            self.card.context += self.behind_torch
            for where in ("first", "second", "third"):
                ctx.watch.sample(where)
        return {"retry_path_ran": True, "kept": kept.numel()}


@pytest.mark.parametrize("driver", ["v2", "v1 only"])
@pytest.mark.parametrize("pids", ["listed", "hidden"])
def test_a_healthy_part_reads_ok_through_nvml_on_a_simulated_card(tmp_path, monkeypatch, driver, pids):
    """The rehearsal's own NVML reader on a card with a 0.9 GiB driver reserve and a 0.6 GiB CUDA
    context: what the part has beyond torch is its context (v2 leaves the reserve out; a v1-only
    driver's reserve was in use before the part, and the reading taken then is subtracted), under
    the 1.0 GiB limit, so the part is ok; v1's `used` alone read 1.5 GiB and failed it."""
    from seakr_repro.doubles.simulated_card import MiB, SimulatedCard
    from seakr_repro.rehearsal import parts
    from seakr_repro.rehearsal.child import PartRun, run_part

    card = SimulatedCard(total=80 * GiB, reserve=900 * MiB, context=600 * MiB)
    monkeypatch.setitem(sys.modules, "pynvml", card.pynvml(v2=driver == "v2", hide_pids=pids == "hidden"))
    monkeypatch.setitem(parts.PARTS, "oom", parts.Part(HealthyPart(card)))
    sampler = CardSampler(card_memory.read_card, folder=tmp_path / "torch", own_reserved=lambda: card.reserved)
    opt = argparse.Namespace(device="cpu", shape="tiny", memory_cap_gib=24.0)
    got = run_part(PartRun("oom", opt, tmp_path, 60, sampler))
    report = got["card"]["outside_torch_gib"]
    assert report["worst"] == pytest.approx(600 / 1024, abs=0.01), report
    assert report["reading"] == ("nvml v2" if driver == "v2" else "nvml v1")
    assert judge("oom", got, {})["status"] == "ok"


def test_a_library_behind_torchs_back_still_fails_the_part_on_a_simulated_card(tmp_path, monkeypatch):
    from seakr_repro.doubles.simulated_card import MiB, SimulatedCard
    from seakr_repro.rehearsal import parts
    from seakr_repro.rehearsal.child import PartRun, run_part

    card = SimulatedCard(total=80 * GiB, reserve=900 * MiB, context=600 * MiB)
    monkeypatch.setitem(sys.modules, "pynvml", card.pynvml())
    monkeypatch.setitem(parts.PARTS, "oom", parts.Part(HealthyPart(card, behind_torch=12 * GiB)))
    sampler = CardSampler(card_memory.read_card, folder=tmp_path / "torch", own_reserved=lambda: card.reserved)
    opt = argparse.Namespace(device="cpu", shape="tiny", memory_cap_gib=24.0)
    got = judge("oom", run_part(PartRun("oom", opt, tmp_path, 60, sampler)), {})
    assert got["status"] == "failed" and "outside torch" in got["why"][0]


def test_the_process_card_is_read_capped_and_counted_as_torchs():
    """Under an active simulated card (the rehearsal on CPU), card_memory reads it as NVML, caps it
    as apply_cap caps torch, and takes its live bytes as this process's torch memory."""
    import torch

    from seakr_repro.doubles import simulated_card

    assert card_memory.simulated() is None and card_memory.read_simulated() is None
    card = simulated_card.activate(simulated_card.SimulatedCard(total=80 * GiB))
    try:
        x = torch.zeros(1024)
        assert card_memory.own_torch_reserved() == 2 * 2**20 == card.reserved      # a 2 MiB segment
        cap = card_memory.apply_cap(24.0)      # a 24 GiB card less what is not torch's: reserve, context
        assert cap["applied"] and cap["simulated"]
        assert card.cap == pytest.approx(24 * GiB - card.reserve - card.context, abs=64)
        assert card_memory.read_card().source == "nvml v2" and card_memory.read_card().used == card.used_bytes(2)
    finally:
        simulated_card.deactivate()
    assert card_memory.simulated() is None and x.numel() == 1024
