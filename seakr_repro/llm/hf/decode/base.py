"""The decode loop every decode path shares, and the interface a path fills in.

A decode call gets prompts' pre-filled caches (`Prefix`: cache, prompt length, next-token logits)
and lanes (`Lane`): rows that share a picker (greedy, or one seeded generator drawing over the
lane's rows in row order), stop strings and a token limit, so a prompt's greedy step and its k
samples, or calls with different stops, share one batch without changing any row's result.

Each step (`DecodePath.decode`): the live rows' logits -> their statistics and each lane's draws
(`draw`, which also reads them back to the host) -> each row's tokens, stop and length checks on
the host (`Batch.advance`) -> the next logits of the rows still live (`ForwardPasses.next_logits`: the
model's forward passes). A path is the choice of `draw`, of `ForwardPasses` and of the attention the
passes run under, so a new path is a new module, not a branch in this loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch

from .. import shared_prefix as sp
from ...sampling import token_stats
from ...stops import find_stop


class Row:
    """The growing state of one sequence during decoding."""

    __slots__ = ("ids", "logprobs", "entropies", "logsumexps", "warped_logprobs", "finish")

    def __init__(self):
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.entropies: list[float] = []
        self.logsumexps: list[float] = []
        self.warped_logprobs: list[float] = []           # samples only
        self.finish: str | None = None


@dataclass
class Lane:
    """Rows of one batch that decode alike: `n` rows over prefix number `prefix`, drawn by `pick`
    (logits -> tokens, or (tokens, warped log-probs): `HFBackend.picker`, `greedy`)."""

    prefix: int
    n: int
    pick: Callable[[torch.Tensor], object]
    max_new_tokens: int
    stop: Sequence[str]
    want_stats: bool


class Prefix(NamedTuple):
    """A pre-filled prompt: its KV cache (batch 1), its length in tokens, its next-token logits."""

    cache: object
    length: int
    logits: torch.Tensor


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


def slots_for(max_new_tokens: int) -> int:
    """Forward passes (suffix slots) a row of at most max_new_tokens tokens can need."""
    return max(1, max_new_tokens - 1)


def spans(labels: Sequence[int]) -> list[tuple[int, int, int]]:
    """(label, start, end) of each run of equal labels."""
    out: list[tuple[int, int, int]] = []
    for i, g in enumerate(labels):
        if out and out[-1][0] == g:
            out[-1] = (g, out[-1][1], i + 1)
        else:
            out.append((g, i, i + 1))
    return out


@dataclass
class StepDraws:
    """One step's draws for the live rows, in live-row order: the tokens on the device, and what the
    host reads back (statistics only when a lane wants them)."""

    tokens: torch.Tensor
    ids: list[int]
    chosen: list[float]
    warped: list
    entropies: list | None
    logsumexp: list | None


class Batch:
    """The rows of one decode call: their lanes, their state, which are still live (`live`: row
    numbers, in batch order; a finished row leaves it) and the suffix slots a row can need (`slots`)."""

    def __init__(self, backend, prefixes: Sequence[Prefix], lanes: Sequence[Lane]):
        self.backend, self.lanes = backend, lanes
        self.prefixes = [Prefix(*p) for p in prefixes]
        self.lane_of = [li for li, lane in enumerate(lanes) for _ in range(lane.n)]
        self.rows = [Row() for _ in self.lane_of]
        self.grouped, i = [], 0
        for lane in lanes:
            self.grouped.append(self.rows[i:i + lane.n])
            i += lane.n
        for r, li in zip(self.rows, self.lane_of):
            if lanes[li].max_new_tokens <= 0:
                r.finish = "length"
        self.live = [r for r, li in enumerate(self.lane_of) if lanes[li].max_new_tokens > 0]
        self.prefix_of = [lanes[li].prefix for li in self.lane_of]
        self.want_stats = any(lane.want_stats for lane in lanes)
        self.slots = slots_for(max((lanes[self.lane_of[r]].max_new_tokens for r in self.live), default=1))

    def first_logits(self) -> torch.Tensor:
        """The live rows' first next-token logits: their prompt's."""
        return torch.cat([self.prefixes[self.prefix_of[r]].logits for r in self.live])

    def first_positions(self, rows: Sequence[int]) -> list[int]:
        """Each row's first generated position: its prompt's length."""
        return [self.prefixes[self.prefix_of[r]].length for r in rows]

    def groups(self, rows: Sequence[int], start: int = 0) -> list[sp.Group]:
        """Attention groups of consecutive `rows` from batch position `start`: one per prompt."""
        return [sp.Group(start + a, start + b, self.prefixes[g].cache)
                for g, a, b in spans([self.prefix_of[r] for r in rows])]

    def picks(self, logits: torch.Tensor):
        """(tokens, warped log-probs or None, rows) per run of live rows of one lane, in row order."""
        for li, a, b in spans([self.lane_of[r] for r in self.live]):
            got = self.lanes[li].pick(logits[a:b])
            tok, warped = got if isinstance(got, tuple) else (got, None)   # samples: + warped
            yield tok, warped, b - a

    def advance(self, drawn: StepDraws) -> list[int]:
        """Add the drawn tokens to the live rows (EOS ends a row, not part of it); the positions
        in `live` of the rows that go on."""
        keep = []
        for j, (ri, t) in enumerate(zip(self.live, drawn.ids)):
            lane = self.lanes[self.lane_of[ri]]
            stats = (drawn.entropies[j], drawn.logsumexp[j]) if lane.want_stats else None
            if self._add(self.rows[ri], t, drawn.chosen[j], drawn.warped[j], stats, lane):
                keep.append(j)
        return keep

    def _add(self, r: Row, t: int, logprob: float, warped: float | None, stats, lane: Lane) -> bool:
        """Add one token to a row; False once the row is finished."""
        if t == self.backend.eos_token_id:
            r.finish = "eos"
            return False
        r.ids.append(t)
        r.logprobs.append(logprob)
        if warped is not None:
            r.warped_logprobs.append(warped)
        if stats is not None:
            r.entropies.append(stats[0])
            r.logsumexps.append(stats[1])
        if lane.stop and find_stop(self.backend._decode(r.ids), lane.stop) >= 0:
            r.finish = "stop"
        elif len(r.ids) >= lane.max_new_tokens:
            r.finish = "length"
        else:
            return True
        return False

    def retain(self, keep: Sequence[int]) -> None:
        self.live = [self.live[j] for j in keep]


class ForwardPasses:
    """How a path runs the model's forward passes over the live rows (one object per call)."""

    def next_logits(self, drawn: StepDraws, keep: Sequence[int]) -> torch.Tensor:
        """The next-token logits of the rows still live (`Batch.live`, already retained), after
        this step's draws (`drawn`, over the rows live before; `keep`: the positions that go on)."""
        raise NotImplementedError


class DecodePath:
    """One decode path: its `draw`, its forward `passes` and their `attention`."""

    name = ""
    fused_attention = False        # decode steps' attention as fused kernels (shared_prefix)
    device_types: tuple[str, ...] | None = None      # the device types it runs on (None: any)
    simulated: str | None = None   # where a stand-in runs in its place (doubles.simulated_graph): why
    calls = 0                      # decode calls this process ran on the path (a report's proof it ran)

    def runs_on(self, device) -> bool:
        return self.device_types is None or torch.device(device).type in self.device_types

    def check(self, device: torch.device) -> None:
        """Refuse (a UserError naming `model.decode`) a device this path cannot run on."""

    def draw(self, batch: Batch, logits: torch.Tensor) -> StepDraws:
        raise NotImplementedError

    def passes(self, backend, batch: Batch) -> ForwardPasses:
        raise NotImplementedError

    def attention(self, backend):
        """The attention the passes run under: each row over its group's prompt (shared prefix)."""
        return sp.use_prefixes(backend.model, fused=self.fused_attention)

    @torch.inference_mode()
    def decode(self, backend, prefixes: Sequence[Prefix], lanes: Sequence[Lane]) -> list[list[Row]]:
        """Decode every lane's rows in one batch; the rows of each lane, in lane order."""
        batch = Batch(backend, prefixes, lanes)
        if not batch.live:
            return batch.grouped
        self.check(backend.device)
        self.calls += 1
        # the sampler works on this many rows at once before any pass runs: an out-of-memory
        # error there halves from it, not from the pre-fill's single row
        backend.oom.note_rows(min(len(batch.live), backend.rows_per_forward or len(batch.live)))
        logits = batch.first_logits()
        passes = self.passes(backend, batch)
        with self.attention(backend):
            while True:
                drawn = self.draw(batch, logits.float())
                keep = batch.advance(drawn)
                if not keep:
                    return batch.grouped
                batch.retain(keep)
                logits = passes.next_logits(drawn, keep)


def chosen_stats(batch: Batch, logits: torch.Tensor, tokens: torch.Tensor):
    """(log-probs of the drawn `tokens`, entropies, logsumexps) of the raw distributions,
    `rows_per_forward` rows at a time (each row's numbers are computed alone: the same values)."""
    step = batch.backend.rows_per_forward or logits.shape[0]
    got = []
    for a in range(0, logits.shape[0], step):
        logp, ent, logsumexp = token_stats(logits[a:a + step], batch.want_stats)
        got.append((logp.gather(1, tokens[a:a + step, None])[:, 0], ent, logsumexp))
    if len(got) == 1:
        return got[0]
    chosen, ent, logsumexp = zip(*got)
    return torch.cat(chosen), *((torch.cat(ent), torch.cat(logsumexp)) if batch.want_stats else (None, None))


def read_back_once(batch: Batch, logits: torch.Tensor) -> StepDraws:
    """Each lane's draws and the step's statistics in ONE device-to-host transfer: float64 holds
    token ids and float32 values exactly; a greedy lane's missing warped log-prob travels as NaN."""
    nxt, warped_cols = [], []
    for tok, warped, n in batch.picks(logits):
        nxt.append(tok)
        warped_cols.append(warped if warped is not None else logits.new_full((n,), float("nan")))
    nxt = torch.cat(nxt)
    chosen, ent, logsumexp = chosen_stats(batch, logits, nxt)
    cols = [nxt, chosen, torch.cat(warped_cols)]
    host = torch.stack([c.double() for c in cols + ([ent, logsumexp] if batch.want_stats else [])],
                       1).cpu().numpy()
    ids, chosen = host[:, 0].astype("int64").tolist(), host[:, 1].tolist()
    warped = [None if w != w else w for w in host[:, 2].tolist()]
    if batch.want_stats:
        ent, logsumexp = host[:, 3].tolist(), host[:, 4].tolist()
    return StepDraws(nxt, ids, chosen, warped, ent, logsumexp)


def read_back_each(batch: Batch, logits: torch.Tensor) -> StepDraws:
    """Each lane's draws and the step's statistics read back one by one (the loop as first written)."""
    nxt, warped = [], []
    for tok, w, n in batch.picks(logits):
        nxt.append(tok)
        warped += w.tolist() if w is not None else [None] * n
    nxt = torch.cat(nxt)
    chosen, ent, logsumexp = chosen_stats(batch, logits, nxt)
    chosen = chosen.tolist()
    if batch.want_stats:
        ent, logsumexp = ent.tolist(), logsumexp.tolist()
    return StepDraws(nxt, nxt.tolist(), chosen, warped, ent, logsumexp)
