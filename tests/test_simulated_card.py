"""The simulated card (doubles/simulated_card.py): each live storage a block of CUDA's caching
allocator (doubles/caching_allocator.py) until it is freed; segments reserved, cached and split as
that allocator's; a cap on the reserved segments that raises torch.OutOfMemoryError where a card's
would; peaks that can be reset; and what NVML would read: the driver's reserve (v1 only), a CUDA context from
the first use, torch's bytes, other processes (fixed, or publishing to a shared folder)."""
from __future__ import annotations


import pytest
import torch

from seakr_repro.doubles import simulated_card as sc
from seakr_repro.doubles.simulated_card import GiB, MiB, SimulatedCard


KiB = 1024


def test_live_storages_hold_a_rounded_block_once_until_freed():
    card = SimulatedCard()
    with card:
        a = torch.zeros(1000)                   # 4,000 bytes: a 4,096-byte block of a 2 MiB segment
        view = a[10:].view(-1, 10)
        b = a.clone()
        assert card.allocated == 8192 and card.reserved == 2 * MiB
        del a
        assert card.allocated == 8192           # the view keeps its storage alive
        del view
        assert card.allocated == 4096
        grown = torch.empty(0)                  # no block for no bytes
        grown.resize_(250)                      # a storage resized in place takes a new block
        assert card.allocated == 5120
        del b, grown
        assert card.allocated == 0 and card.peak_allocated == 8192
        assert card.reserved == card.peak == 2 * MiB          # the segment stays cached
        card.reset_peak()
        assert card.peak_allocated == 0 and card.peak == 2 * MiB
        card.empty_cache()
        assert card.reserved == 0
    outside = torch.zeros(10)                   # not entered: not counted
    assert card.allocated == 0 and outside.numel() == 10


def _mixed(card: SimulatedCard) -> list:
    """Small and large tensors whose blocks and segments follow from the allocator's rules alone."""
    held = [torch.empty(600 * KiB // 4) for _ in range(4)]     # three share a 2 MiB segment, then a second
    assert card.allocated == 2400 * KiB and card.reserved == 4 * MiB
    held.append(torch.empty(5 * MiB // 4))       # under 10 MiB: a 20 MiB segment, split
    held.append(torch.empty(12 * MiB // 4))      # the best fit is the 15 MiB left of it: split again
    assert card.reserved == 24 * MiB
    held.append(torch.empty(11 * MiB // 4))      # 3 MiB left fits not: 12 MiB of its own, 1 MiB not split off
    assert card.reserved == 36 * MiB and card.allocated == 2400 * KiB + 29 * MiB
    held[4] = None
    held.append(torch.empty(4 * MiB // 4))       # the freed 5 MiB block, whole: 1 MiB is not worth a split
    assert card.reserved == 36 * MiB and card.allocated == 2400 * KiB + 29 * MiB
    return held


def test_the_cap_is_on_the_reserved_segments_as_on_a_card():
    card = SimulatedCard()
    with card:
        _mixed(card)
    allocated, reserved = card.peak_allocated, card.peak
    assert (allocated, reserved) == (2400 * KiB + 29 * MiB, 36 * MiB)
    for cap in (allocated - MiB, (allocated + reserved) // 2):     # below the live peak, and between
        card = SimulatedCard(cap=cap)
        with card, pytest.raises(torch.OutOfMemoryError, match="simulated card"):
            _mixed(card)
        assert card.refused == 1 and card.reserved <= cap
    card = SimulatedCard(cap=reserved)
    with card:
        _mixed(card)
    assert card.peak == reserved and card.refused == 0


def test_an_allocation_over_the_cap_first_releases_the_unused_segments():
    card = SimulatedCard(cap=24 * MiB)
    with card:
        x = torch.empty(11 * MiB // 4)
        del x                                   # its 12 MiB segment stays cached
        y = torch.empty(15 * MiB // 4)          # a 16 MiB segment: 28 MiB reserved would pass the cap
        assert card.reserved == 16 * MiB and card.refused == 0
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(9 * MiB // 4)           # a 20 MiB segment does not fit beside y's
        assert card.allocated == 16 * MiB and card.refused == 1 and y.numel()


def test_hold_counts_a_model_built_before_the_card():
    model = torch.nn.Linear(10, 5)
    card = SimulatedCard()
    with card:
        assert card.hold(model) == 2 * 512                # 200 and 20 bytes: a 512-byte block each
        assert card.hold(model) == 0                       # already counted


def test_the_environment_switch_makes_the_process_card():
    assert sc.parse_spec("1") == {}
    assert sc.parse_spec("total_gib=24, cap_gib=1.5,predict=llama-2-7b") == \
        {"total": 24 * GiB, "cap": int(1.5 * GiB), "predict": {"llama-2-7b": "llama-2-7b"}}
    with pytest.raises(ValueError, match="SEAKR_SIMULATED_CARD"):
        sc.parse_spec("size=3")
    assert sc.activate_from_env({}) is None and sc.active() is None
    card = sc.activate_from_env({sc.ENV: "cap_gib=1"})
    try:
        assert sc.active() is card and card.cap == GiB
        x = torch.ones(256)
        assert card.allocated == 1024 and card.reserved == 2 * MiB
    finally:
        sc.deactivate()
    assert sc.active() is None and x.numel() == 256
