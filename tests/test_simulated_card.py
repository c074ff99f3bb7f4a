"""The simulated card (doubles/simulated_card.py): bytes of live tensors, counted once per storage
and until it is freed; a cap that raises torch.OutOfMemoryError as CUDA's allocator does; a peak
that can be reset; and what NVML would read: the driver's reserve (v1 only), a CUDA context from
the first use, torch's bytes, other processes (fixed, or publishing to a shared folder)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.doubles import simulated_card as sc
from seakr_repro.doubles.simulated_card import GiB, MiB, SimulatedCard


def test_live_storages_are_counted_once_until_freed():
    card = SimulatedCard()
    with card:
        a = torch.zeros(1000)                   # 4,000 bytes
        view = a[10:].view(-1, 10)
        b = a.clone()
        assert card.allocated == 8000
        del a
        assert card.allocated == 8000           # the view keeps its storage alive
        del view
        assert card.allocated == 4000
        grown = torch.empty(0)
        grown.resize_(250)                      # a storage resized in place counts its new size
        assert card.allocated == 5000
        del b, grown
        assert card.allocated == 0 and card.peak == 8000
        card.reset_peak()
        assert card.peak == 0
    outside = torch.zeros(10)                   # not entered: not counted
    assert card.allocated == 0 and outside.numel() == 10


def test_the_cap_refuses_what_goes_over_it_and_counts_nothing_of_it():
    card = SimulatedCard(cap=10_000)
    with card:
        keep = torch.zeros(2000)
        with pytest.raises(torch.OutOfMemoryError, match="simulated card"):
            torch.zeros(1000)
        assert card.allocated == 8000 and card.peak == 8000 and card.refused == 1
        assert torch.zeros(500).numel() == 500            # what fits still runs
    assert keep.numel() == 2000


def test_hold_counts_a_model_built_before_the_card():
    model = torch.nn.Linear(10, 5)
    card = SimulatedCard()
    with card:
        assert card.hold(model) == (50 + 5) * 4
        assert card.hold(model) == 0                       # already counted


def test_what_nvml_reads_v1_counts_the_drivers_reserve_v2_does_not():
    card = SimulatedCard(total=24 * GiB, reserve=600 * MiB, context=500 * MiB, others={4242: GiB})
    nvml = card.pynvml(v2=True)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMemoryInfo(handle).used == 600 * MiB + GiB      # no context yet
    with card:
        x = torch.zeros(GiB // 4 // 1024, 1024)                              # 1 GiB of torch's
        v1 = nvml.nvmlDeviceGetMemoryInfo(handle)
        v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        procs = {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    assert v1.used == 600 * MiB + 500 * MiB + GiB + GiB and v1.free == 24 * GiB - v1.used
    assert v2.used == v1.used - 600 * MiB and v2.reserved == 600 * MiB
    assert procs == {4242: GiB, os.getpid(): 500 * MiB + GiB}
    old = card.pynvml(v2=False, hide_pids=True)
    assert not hasattr(old, "nvmlMemory_v2") and old.nvmlDeviceGetComputeRunningProcesses(handle) == []
    with pytest.raises(old.NVMLError):
        old.nvmlDeviceGetMemoryInfo(handle, version=2)
    del x


def test_the_environment_switch_makes_the_process_card():
    assert sc.parse_spec("1") == {}
    assert sc.parse_spec("total_gib=24, reserve_mib=700,folder=/tmp/c") == \
        {"total": 24 * GiB, "reserve": 700 * MiB, "folder": "/tmp/c"}
    with pytest.raises(ValueError, match="SEAKR_SIMULATED_CARD"):
        sc.parse_spec("size=3")
    assert sc.activate_from_env({}) is None and sc.active() is None
    card = sc.activate_from_env({sc.ENV: "cap_gib=1"})
    try:
        assert sc.active() is card and card.cap == GiB
        x = torch.ones(256)
        assert card.allocated == 1024
    finally:
        sc.deactivate()
    assert sc.active() is None and x.numel() == 256


CHILD = textwrap.dedent("""
    import sys, time, torch
    from seakr_repro.doubles import simulated_card as sc
    card = sc.activate_from_env()
    x = torch.zeros(2**20 // 4)            # 1 MiB of torch's on the shared card
    open(sys.argv[1], "w").write("up")
    time.sleep(30)
""")


def test_processes_on_one_folder_are_on_one_card(tmp_path):
    """A part's child process (its own card, the same folder) is read by the parent's NVML."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), sc.ENV: f"context_mib=300,folder={tmp_path / 'card'}"}
    up = tmp_path / "up"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(up)], env=env)
    try:
        card = SimulatedCard(context=300 * MiB, folder=tmp_path / "card")
        deadline = time.monotonic() + 60
        while not up.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the child never started"
            time.sleep(0.05)
        time.sleep(3 * sc.PUBLISH_S)
        assert card.processes()[proc.pid] == 300 * MiB + MiB
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in card.processes()              # a dead process holds nothing
