"""How the rows decoded over one prompt hold its KV cache (`HFBackend.prompt_rows`, chosen once
from `shared_prefix`): `SharedPrompt`, the default, over ONE copy of the prompt's keys and values
(`shared_prefix.py`), several prompts' rows in one batch on the backend's decode path;
`CopiedPrompt` (`shared_prefix=False`, or an unsupported architecture), the reference path, one
prompt at a time, its cache copied into every row. Both give the same tokens for the same seed
and the forced-EOS vectors from one more pass over the pristine prompt cache.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from . import shared_prefix as sp
from .decode.base import Lane, Prefix, Row, greedy
from .prefix_cache import repeat_cache
from ..base import Generation, SampleSet
from ..hooks import run_until_captured
from ..sampling_settings import Sampling
from ..stops import forced_eos_of
from ..tokenizing import check_fits


class SharedPrompt:
    """Rows over one shared copy of their prompt's cache; prompts batched together."""

    def generate_many(self, be, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str],
                      want_stats: bool) -> list[Generation]:
        if len(prompts) < 2:
            return COPIED.generate_many(be, prompts, max_new_tokens, stop, want_stats)
        ids = [be._encode(p) for p in prompts]
        for x in ids:
            check_fits(len(x), max(0, max_new_tokens), be.max_context, be.name)

        def run(batch):
            pre = [be.prefill(x) for x in batch]
            return be.decode_lanes(
                [Prefix(cache, len(x), logits) for (cache, logits), x in zip(pre, batch)],
                [Lane(g, 1, greedy, max_new_tokens, stop, want_stats) for g in range(len(batch))])
        return [be.finish_row(r, stop, x, want_stats) for (r,), x in zip(be.oom.by_contexts(run, ids), ids)]

    def sample_many(self, be, prompts: Sequence[str], a: Sampling) -> list[SampleSet]:
        return [ss for _, ss in be.oom.by_contexts(lambda items: self.decode(be, items),
                                                   [(p, a, None) for p in prompts])]

    def generate_and_sample_many(self, be, prompts: Sequence[str], gens: Sequence[dict],
                                 smps: Sequence[Sampling]) -> list[tuple[Generation, SampleSet]]:
        items = []
        for p, g, sm in zip(prompts, gens, smps):
            g = {"stop": (), "want_stats": False, **g}
            items.append((p, sm.at_layer(be.n_layers), {**g, "stop": tuple(g["stop"])}))
        return be.oom.by_contexts(lambda batch: self.decode(be, batch), items)

    def decode(self, be, items: list[tuple[str, Sampling, dict | None]]) -> list:
        """[(greedy Generation or None, SampleSet)] of (prompt, `Sampling` at the model's layer,
        greedy settings or None) items in one batch (chunks of `max_batch_rows` rows per prompt); a
        greedy row goes in the first chunk in a lane of its own, so the samples' draws do not change."""
        ids = [be._encode(p) for p, _, _ in items]
        for x, (_, a, gr) in zip(ids, items):     # + 1: the forced EOS after the longest sample
            check_fits(len(x), max(max(0, a.max_new_tokens) + 1,
                                   max(0, gr["max_new_tokens"]) if gr else 0),
                       be.max_context, be.name)
        pre = [be.prefill(x) for x in ids]                   # (cache, logits) per prompt
        prefixes = [Prefix(cache, len(x), logits) for (cache, logits), x in zip(pre, ids)]
        picks = [be.picker(a.seed, a.temperature, a.top_k, a.top_p) for _, a, _ in items]
        rows: list[list[Row]] = [[] for _ in items]
        greedy_rows: dict[int, Row] = {}
        k_max = max(a.k for _, a, _ in items)
        chunk = be.max_batch_rows or max(k_max, 1)
        for start in range(0, max(k_max, 1), chunk):
            # each prompt's greedy lane right after its samples' lane: adjacent rows over one
            # prompt are one attention group
            lanes, owner = [], []
            for g, (_, a, gr) in enumerate(items):
                lanes.append(Lane(g, max(0, min(chunk, a.k - start)), picks[g], a.max_new_tokens, a.stop,
                                  a.want_stats))
                owner.append((g, False))
                if gr and start == 0:
                    lanes.append(Lane(g, 1, greedy, gr["max_new_tokens"], gr["stop"], gr["want_stats"]))
                    owner.append((g, True))
            for (g, is_greedy), got in zip(owner, be.decode_lanes(prefixes, lanes)):
                if is_greedy:
                    greedy_rows[g] = got[0]
                else:
                    rows[g].extend(got)
        out = []
        for g, (x, (_, a, gr)) in enumerate(zip(ids, items)):
            samples = [be.finish_row(r, a.stop, x, a.want_stats) for r in rows[g]]
            greedy_gen = be.finish_row(greedy_rows[g], gr["stop"], x, gr["want_stats"]) if gr else None
            vec = (be.eos_vectors(pre[g][0], forced_eos_seqs(be, samples, a), a.layer, a.hook)
                   if samples else np.zeros((0, be.hidden_size), np.float32))
            out.append((greedy_gen, SampleSet(samples=samples, vectors=vec, layer=a.layer, hook=a.hook)))
        return out

    def eos_rows(self, be, prompt_cache, inp, width: int) -> None:
        """Run the rows `inp` (each its whole suffix) over the shared prompt cache until captured."""
        n = inp.shape[0]
        pos = prompt_cache.get_seq_length() + torch.arange(width, device=be.device)
        with sp.use_prefixes(be.model, [sp.Group(0, n, prompt_cache)]):
            run_until_captured(be.model.model, input_ids=inp, position_ids=pos[None].expand(n, -1),
                               use_cache=False)


class CopiedPrompt:
    """The reference path: one prompt at a time, its cache copied into every row of a chunk."""

    def generate_many(self, be, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str],
                      want_stats: bool) -> list[Generation]:
        return [be.generate(p, max_new_tokens=max_new_tokens, stop=stop, want_stats=want_stats)
                for p in prompts]

    def sample_many(self, be, prompts: Sequence[str], a: Sampling) -> list[SampleSet]:
        return [be.oom.run(lambda p=p: self.sample(be, p, a)) for p in prompts]

    def generate_and_sample_many(self, be, prompts: Sequence[str], gens: Sequence[dict],
                                 smps: Sequence[Sampling]) -> list[tuple[Generation, SampleSet]]:
        return [(be.generate(p, **g), be.sample(p, sm)) for p, g, sm in zip(prompts, gens, smps)]

    def sample(self, be, prompt: str, a: Sampling) -> SampleSet:
        """k samples of one prompt; after an out-of-memory its chunks shrink to `rows_per_forward`
        (which changes the samples: the generator's draws follow the chunks)."""
        ids = be._encode(prompt)
        check_fits(len(ids), max(0, a.max_new_tokens) + 1, be.max_context, be.name)
        prompt_cache, logits = be.prefill(ids)
        pick = be.picker(a.seed, a.temperature, a.top_k, a.top_p)
        k = a.k
        samples: list[Generation] = []
        vectors: list[np.ndarray] = []
        chunk = min(be.max_batch_rows or k, be.rows_per_forward or k)
        for start in range(0, k, chunk):
            n = min(chunk, k - start)
            cache = repeat_cache(prompt_cache, n)
            be.oom.note_rows(n)
            rows = be.decode_reference(cache, logits, Lane(0, n, pick, a.max_new_tokens, a.stop, a.want_stats))
            del cache
            part = [be.finish_row(r, a.stop, ids, a.want_stats) for r in rows]
            vectors.append(be.eos_vectors(prompt_cache, forced_eos_seqs(be, part, a), a.layer, a.hook))
            samples.extend(part)
        vec = np.concatenate(vectors) if vectors else np.zeros((0, be.hidden_size), np.float32)
        return SampleSet(samples=samples, vectors=vec, layer=a.layer, hook=a.hook)

    def eos_rows(self, be, prompt_cache, inp, width: int) -> None:
        """Run the rows `inp` over copies of the prompt cache, one per row."""
        run_until_captured(be.model.model, input_ids=inp, past_key_values=repeat_cache(prompt_cache, inp.shape[0]),
                           use_cache=True)


def forced_eos_seqs(be, samples: list[Generation], a: Sampling) -> list[list[int]]:
    """Each sample's forced-EOS sequence minus its EOS, which eos_vectors appends."""
    return [forced_eos_of(s, be.eos_token_id, a.forced_eos)[:-1] for s in samples]


SHARED, COPIED = SharedPrompt(), CopiedPrompt()
