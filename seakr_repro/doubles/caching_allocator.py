"""PyTorch's CUDA caching allocator as arithmetic, so a cap trips where
`torch.cuda.set_per_process_memory_fraction` trips on a card: it caps the reserved segments.

The rules of c10/cuda/CUDACachingAllocator.cpp at its defaults (one stream, no expandable segments,
no max_split_size): a request is rounded up to 512 bytes; up to 1 MiB it comes from the small pool's
2 MiB segments, else from the large pool's segments of 20 MiB (requests under 10 MiB) or of the
request rounded up to 2 MiB. It takes the smallest cached free block of its pool that fits, split
when the rest is worth keeping (small pool: 512 bytes or more; large: over 1 MiB); a freed block
merges with its free neighbours and stays cached. A segment is reserved only when no cached block
fits; where that would pass the cap, the segments with nothing in use are released and the
reservation tried again before the allocation fails. `allocated` counts the blocks in use at their
sizes (a block not split counts whole), `reserved` the segments: torch.cuda's memory_allocated and
memory_reserved; `peak_allocated` and `peak` their most (max_memory_allocated, max_memory_reserved).
"""
from __future__ import annotations

import bisect
import itertools

import torch

# c10/cuda/CUDACachingAllocator.cpp's kMinBlockSize, kSmallSize, kSmallBuffer, kLargeBuffer,
# kMinLargeAlloc, kRoundLarge (c10/core/AllocatorConfig.h in newer releases)
MIN_BLOCK, SMALL_SIZE, SMALL_BUFFER = 512, 2**20, 2 * 2**20
LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE = 20 * 2**20, 10 * 2**20, 2 * 2**20


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def segment_size(size: int) -> int:
    """The segment reserved for a (rounded) request that no cached block fits."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    return LARGE_BUFFER if size < MIN_LARGE_ALLOC else _round_up(size, ROUND_LARGE)


class Block:
    """A stretch of a segment, in use or free, between its neighbours `prev` and `next`."""
    __slots__ = ("size", "small", "prev", "next", "free", "serial")

    def __init__(self, size: int, small: bool):
        self.size, self.small, self.prev, self.next, self.free, self.serial = size, small, None, None, False, 0


def _link(a: Block | None, b: Block | None) -> None:
    if a is not None:
        a.next = b
    if b is not None:
        b.prev = a


class CachingAllocator:
    """See the module's note. `cap`: the most bytes the segments may take (None: no cap)."""

    def __init__(self, cap: int | None = None):
        self.cap = cap
        self.allocated = self.reserved = self.peak_allocated = self.peak = 0
        self.refused = 0                                     # allocations that failed for the cap
        self._cached: dict[bool, list] = {True: [], False: []}   # by pool: (size, serial, block), sorted
        self._serials = itertools.count()
        self._busy, self._pending = False, []    # blocks freed (by a finalizer) while the pools change

    def malloc(self, nbytes: int) -> Block | None:
        """A block for `nbytes` (None for none, as CUDA's); torch.OutOfMemoryError over the cap."""
        if nbytes == 0:
            return None
        size = _round_up(nbytes, MIN_BLOCK)
        small = size <= SMALL_SIZE
        self._busy = True
        try:
            pool = self._cached[small]
            i = bisect.bisect_left(pool, (size, -1))
            block = self._uncache(pool[i][2]) if i < len(pool) else self._segment(small, size)
            rest = block.size - size
            if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
                tail = Block(rest, small)
                _link(tail, block.next)
                _link(block, tail)
                block.size = size
                self._cache(tail)
            self.allocated += block.size
            self.peak_allocated = max(self.peak_allocated, self.allocated)
        finally:
            self._busy = False
            self._drain()
        return block

    def free(self, block: Block | None) -> None:
        """Back to the cache, merged with its free neighbours (its segment stays reserved)."""
        if block is not None:
            self._pending.append(block)
            if not self._busy:
                self._drain()

    def _drain(self) -> None:
        self._busy = True
        try:
            while self._pending:
                block = self._pending.pop()
                self.allocated -= block.size
                for other in (block.prev, block.next):
                    if other is not None and other.free:
                        block.size += self._uncache(other).size
                        if other is block.prev:
                            _link(other.prev, block)
                        else:
                            _link(block, other.next)
                self._cache(block)
        finally:
            self._busy = False

    def empty_cache(self) -> None:
        """Release every segment with nothing in use (`torch.cuda.empty_cache`)."""
        for size, _, block in [e for pool in self._cached.values() for e in pool]:
            if block.prev is None and block.next is None:
                self._uncache(block)
                self.reserved -= size

    def _segment(self, small: bool, size: int) -> Block:
        grow = segment_size(size)
        if self.cap is not None and self.reserved + grow > self.cap:
            self.empty_cache()
            if self.reserved + grow > self.cap:
                self.refused += 1
                raise torch.OutOfMemoryError(
                    f"simulated card: tried to allocate {size / 2**20:.2f} MiB (a {grow / 2**20:.0f} MiB segment); "
                    f"{self.allocated / 2**20:.2f} MiB allocated, {self.reserved / 2**20:.2f} MiB reserved "
                    f"of a {self.cap / 2**20:.2f} MiB cap")
        self.reserved += grow
        self.peak = max(self.peak, self.reserved)
        return Block(grow, small)

    def _cache(self, block: Block) -> None:
        block.free, block.serial = True, next(self._serials)
        bisect.insort(self._cached[block.small], (block.size, block.serial, block))

    def _uncache(self, block: Block) -> Block:
        pool = self._cached[block.small]
        del pool[bisect.bisect_left(pool, (block.size, block.serial))]
        block.free = False
        return block

    def reset_peak(self) -> None:
        """Start peak_allocated and peak over from now (`torch.cuda.reset_peak_memory_stats`)."""
        self.peak_allocated, self.peak = self.allocated, self.reserved
