"""The transformers backend (reference implementation, CPU and GPU): our own decode loop with a KV
cache (docs/speed.md: shared pre-fill and prefixes, the decode paths, the out-of-memory retry).
What a caller relies on:
- Rows are decoded in lanes (`Lane`), so calls with different settings share one batch without
  changing any row's result.
- Each prompt's rows draw from one generator seeded with `seed`, in row order: the same tokens on
  every path, in any split into forward passes, in `sample` or `sample_many`.
- Forced-EOS vectors come from one right-padded causal pass over the pristine prompt cache:
  identical sequences get identical vectors.
- Stop strings are searched in the generated text only, as vLLM does (`stops`); log-probs,
  entropies and logsumexps are the raw distribution's, `warped_logprobs` the sampler's.
- Texts are decoded after the prompt's last tokens (`tokenizing.decode_pieces`), as vLLM does;
  a prompt that does not fit `max_context` is refused (`tokenizing.ContextOverflowError`).
"""
from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from . import shared_prefix as sp
from .decode.base import Lane, Prefix, Row, greedy
from .decode.paths import REFERENCE, strategy
from .oom import OutOfMemoryRetry
from .prompt_rows import COPIED, SHARED
from .prefix_cache import PrefixCache
from ..base import Generation, SampleSet, per_prompt
from ..hooks import HOOKS, capture
from ..model_info import generation_config_of, model_dims, text_config, weights_fingerprint
from ..sampling import sample_tokens, token_stats
from ..sampling_settings import Sampling
from ..stops import cut_at_stop, stop_end
from ..attention import WordsMixin
from ...core.setting_choices import DECODE_SETTINGS, resolve_decode
from ..tokenizing import TokenizerMixin, check_fits, check_reads


class HFBackend(WordsMixin, TokenizerMixin):
    """`Backend` over a transformers causal LM. Build it with `from_dir` or `registry.load_backend`."""

    def __init__(self, model, tokenizer, name: str, fingerprint: str = "",
                 max_batch_rows: int | None = None, prefix_cache_tokens: int = 16384,
                 shared_prefix: bool = True, max_batch_contexts: int | None = None,
                 decode: str = "auto"):
        if decode not in DECODE_SETTINGS:
            from ...core.errors import UserError
            raise UserError(f"unknown decode path {decode!r}", setting="model.decode",
                            fix=f"use one of {', '.join(DECODE_SETTINGS)}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.fingerprint = fingerprint or name
        self.n_layers, self.hidden_size, self.eos_token_id = model_dims(model.config, tokenizer)
        self.device = next(model.parameters()).device
        # `decode_path`, not `decode`: Backend.decode(ids) is the tokenizer's, which DRAGIN's baselines call
        self.decode_path = resolve_decode(decode)
        strategy(self.decode_path).check(self.device)     # e.g. graph: CUDA only
        # longer prompts are refused (check_fits); the methods fit theirs first (prompts.fit_prompt)
        n_ctx = getattr(text_config(model.config), "max_position_embeddings", None)
        self.max_context: int | None = int(n_ctx) if n_ctx else None
        self.max_batch_rows = max_batch_rows      # rows decoded together in `sample`: None = all k
        self.prefixes = PrefixCache(prefix_cache_tokens)    # chunk-boundary KV caches, bounded in tokens
        self.shared_prefix_unsupported = sp.unsupported_reason(model.config)
        self.shared_prefix = bool(shared_prefix) and self.shared_prefix_unsupported is None
        if shared_prefix and self.shared_prefix_unsupported:
            warnings.warn(f"{name}: shared-prefix decoding is off ({self.shared_prefix_unsupported}); "
                          "the k samples copy the prompt's KV cache into every row (slower, more "
                          "memory, same results)", stacklevel=2)
        # contexts decoded together (None = all; each holds its own prompt cache), halved with the
        # rows per forward pass on out-of-memory
        self.max_batch_contexts = max_batch_contexts
        self.oom = OutOfMemoryRetry(name, self.reset_prefix_cache, max_batch_contexts)
        # generation_config.json (from_dir); None: not read, and faithful baselines refuse to guess
        self.generation_config: dict | None = None

    @property
    def prompt_rows(self):
        """How the rows over one prompt hold its cache (`prompt_rows.py`)."""
        return SHARED if self.shared_prefix else COPIED

    @property
    def rows_per_forward(self) -> int | None:
        """Rows per forward pass (None = all): the out-of-memory retry's, as are the contexts below."""
        return self.oom.rows_per_forward

    @rows_per_forward.setter
    def rows_per_forward(self, n: int | None) -> None:
        self.oom.rows_per_forward = n

    @property
    def contexts_per_batch(self) -> int | None:
        return self.oom.contexts_per_batch

    @contexts_per_batch.setter
    def contexts_per_batch(self, n: int | None) -> None:
        self.oom.contexts_per_batch = n

    @property
    def prefix_cache_tokens(self) -> int:
        return self.prefixes.max_tokens

    @property
    def prefix_hits(self) -> int:
        return self.prefixes.hits

    def stats(self) -> dict[str, int]:
        return {"oom_retries": self.oom.retries, "oom_seconds": round(self.oom.seconds, 3)}

    @classmethod
    def from_dir(cls, path: str | Path, *, name: str, device: str = "cpu",
                 dtype: torch.dtype = torch.float32, max_batch_rows: int | None = None,
                 prefix_cache_tokens: int = 16384, shared_prefix: bool = True,
                 max_batch_contexts: int | None = None, decode: str = "auto") -> "HFBackend":
        from transformers import AutoModelForCausalLM, AutoTokenizer
        path = Path(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        backend = cls(model, tok, name, weights_fingerprint(path, dtype, device), max_batch_rows,
                      prefix_cache_tokens, shared_prefix, max_batch_contexts, decode)
        backend.generation_config = generation_config_of(path)
        return backend

    def close(self) -> None:
        self.prefixes.clear()
        self.model = None

    def reset_prefix_cache(self) -> None:
        self.prefixes.clear()

    def forward(self, ids: torch.Tensor, cache=None, position_ids=None):
        """The model's pass over `ids` (rows x tokens) on `cache`: every pre-fill and decode pass,
        so a wrapper sees them all (one that raises first calls `oom.note_rows`). Last position's
        logits only: the LM head over a whole prompt costs several layers."""
        self.oom.note_rows(int(ids.shape[0]))
        return self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1,
                          position_ids=position_ids)

    def prefill(self, prompt_ids: Sequence[int]):
        """(KV cache, the caller's to grow, next-token logits) of a prompt (`PrefixCache`)."""
        return self.prefixes.prefill(prompt_ids, self.forward, self.device)

    def picker(self, seed: int, temperature: float, top_k: int, top_p: float) -> Callable:
        """A lane's sampler: (tokens, warped log-probs) from one generator seeded with `seed`, over
        its rows in order (`rows_per_forward` at a time after an out-of-memory: the same draws)."""
        gen = torch.Generator(device=self.device).manual_seed(int(seed))

        def pick(logits):
            return sample_tokens(logits, temperature, top_k, top_p, gen, rows=self.rows_per_forward)
        return pick

    def decode_lanes(self, prefixes: Sequence[Prefix], lanes: Sequence[Lane]) -> list[list[Row]]:
        """Every lane's rows, in lane order, decoded in one batch on the decode path."""
        return strategy(self.decode_path).decode(self, prefixes, lanes)

    def decode_reference(self, cache, logits: torch.Tensor, lane: Lane) -> list[Row]:
        """One lane on the reference path: `cache` holds the prompt in each row (grown in place)."""
        return REFERENCE.decode(self, [Prefix(cache, 0, logits)], [lane])[0]

    def finish_row(self, r: Row, stop: Sequence[str], prompt_ids: Sequence[int],
                want_stats: bool) -> Generation:
        """The Generation of a decoded row, cut before its stop string."""
        pieces = self._pieces(r.ids, prompt_ids)
        # cut wherever the text in context holds a stop string, even one the decode loop's
        # check (on the ids alone) could not see, e.g. one that starts with the leading space
        text, n = cut_at_stop(pieces, stop)
        finish = "stop" if len(text) < sum(map(len, pieces)) else (r.finish or "length")
        # the uncut ids end at the token that completed the stop (the forced-EOS sequence's end)
        end = stop_end(pieces, stop) if finish == "stop" else len(r.ids)
        return Generation(
            text=text, token_ids=r.ids[:n], tokens=pieces[:n],
            logprobs=r.logprobs[:n],
            entropies=r.entropies[:n] if want_stats else None,
            logsumexp=r.logsumexps[:n] if want_stats else None,
            finish_reason=finish, n_prompt_tokens=len(prompt_ids),
            all_token_ids=list(r.ids[:end]), all_logprobs=list(r.logprobs[:end]),
            warped_logprobs=list(r.warped_logprobs[:end]) if r.warped_logprobs else None)

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        ids = self._encode(prompt)
        check_fits(len(ids), max(0, max_new_tokens), self.max_context, self.name)

        def run():
            cache, logits = self.prefill(ids)
            return self.decode_reference(cache, logits, Lane(0, 1, greedy, max_new_tokens, stop, want_stats))[0]
        gen = self.finish_row(self.oom.run(run), stop, ids, want_stats)
        if want_attention:
            gen.attention = self._attention(gen.token_ids)
        return gen

    def generate_many(self, prompts: Sequence[str], *, max_new_tokens: int,
                      stop: Sequence[str] = (), want_stats: bool = False) -> list[Generation]:
        """Greedy `generate` of several prompts: one batch with shared-prefix decoding, else one by one."""
        return self.prompt_rows.generate_many(self, prompts, max_new_tokens, stop, want_stats)

    def sample(self, prompt: str, settings: Sampling) -> SampleSet:
        return self.sample_many([prompt], settings)[0]

    def sample_many(self, prompts: Sequence[str], settings: Sampling) -> list[SampleSet]:
        """`sample` of each prompt, all in one batch: the same result as one after another."""
        return self.prompt_rows.sample_many(self, prompts, settings.at_layer(self.n_layers))

    def generate_and_sample_many(self, prompts: Sequence[str], *, generate: dict | Sequence[dict],
                                 sample: dict | Sequence[dict]) -> list[tuple[Generation, SampleSet]]:
        """Each prompt's greedy row in the batch of its k samples (alone it costs a pass per token, in
        the batch almost nothing); the same samples as `sample_many`."""
        gens, smps = per_prompt(generate, len(prompts)), per_prompt(sample, len(prompts))
        return self.prompt_rows.generate_and_sample_many(self, prompts, gens, smps)

    @torch.inference_mode()
    def score(self, prompt: str, continuation: str) -> Generation:
        p_ids, c_ids, empty = self._score_ids(prompt, continuation)
        if empty is not None:
            return empty
        check_fits(len(p_ids) + len(c_ids), 0, self.max_context, self.name)
        ids = torch.tensor([p_ids + c_ids], device=self.device)
        logits = self.model(input_ids=ids).logits[0, len(p_ids) - 1:-1].float()
        logp, ent, logsumexp = token_stats(logits)
        tgt = torch.tensor(c_ids, device=self.device)
        return Generation(
            text=continuation, token_ids=list(c_ids), tokens=self._pieces(c_ids, p_ids),
            logprobs=logp.gather(1, tgt[:, None])[:, 0].tolist(),
            entropies=ent.tolist(), logsumexp=logsumexp.tolist(),
            finish_reason="stop", n_prompt_tokens=len(p_ids))

    @torch.inference_mode()
    def read_logprobs(self, prompt: str, continuation_ids: Sequence[int],
                      reads: Sequence[tuple[int, int]]) -> Generation:
        """`BackendExtras.read_logprobs`: one forward pass over the prompt and the given ids."""
        p_ids, c_ids = self._encode(prompt), [int(t) for t in continuation_ids]
        n = check_reads(reads, len(c_ids))
        check_fits(len(p_ids) + n, 0, self.max_context, self.name)
        ids = torch.tensor([p_ids + c_ids[:n]], device=self.device)
        logp = torch.log_softmax(self.model(input_ids=ids).logits[0, len(p_ids) - 1:].float(), -1)
        return Generation(text="", logprobs=[float(logp[j, t]) for j, t in reads],
                          finish_reason="stop", n_prompt_tokens=len(p_ids))

    @torch.inference_mode()
    def eos_vectors(self, prompt_cache, completions: list[list[int]], layer: int,
                     hook: str) -> np.ndarray:
        """Vector at the forced EOS of "prompt + completion + EOS" at one layer and hook."""
        return self._eos_pass(prompt_cache, completions, [(layer, hook)])[(layer, hook)]

    def eos_vectors_all_layers(self, prompt: str, completions: Sequence[Sequence[int]]) -> dict:
        """Step 02: {hook: L x k x d} from the same pass `sample` takes its vectors from, so the
        U step 03 calibrates on is bit for bit the U the methods compute."""
        cache, _ = self.prefill(self._encode(prompt))
        wanted = [(at, h) for h in HOOKS for at in range(self.n_layers)]
        got = self._eos_pass(cache, [list(c) for c in completions], wanted)
        return {h: np.stack([got[(at, h)] for at in range(self.n_layers)]) for h in HOOKS}

    @torch.inference_mode()
    def _eos_pass(self, prompt_cache, completions: list[list[int]],
                  wanted: list[tuple[int, str]]) -> dict[tuple[int, str], np.ndarray]:
        """{(layer, hook): n x d} at the forced EOS of "prompt + completion + EOS", in one batched
        pass, each distinct completion once: identical samples get bit-identical vectors (a batched
        product can round a row differently by its position in the batch)."""
        if not completions:
            return {w: np.zeros((0, self.hidden_size), np.float32) for w in wanted}
        first: dict[tuple[int, ...], int] = {}
        which = [first.setdefault(tuple(c), len(first)) for c in completions]
        completions = [list(c) for c in first]
        n = len(completions)
        width = max(len(c) for c in completions) + 1
        # Right padding with EOS: causal attention keeps it invisible to each row's own EOS.
        inp = torch.full((n, width), self.eos_token_id, dtype=torch.long)
        for i, c in enumerate(completions):
            inp[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        inp = inp.to(self.device)
        ends = torch.tensor([len(c) for c in completions])
        step = self.rows_per_forward or n
        outs: dict[tuple[int, str], list] = {w: [] for w in wanted}
        for a in range(0, n, step):
            b = min(n, a + step)
            self.oom.note_rows(b - a)
            with contextlib.ExitStack() as stack:
                boxes = {w: stack.enter_context(capture(self.model, *w, stop_after=len(wanted) == 1))
                         for w in wanted}
                self.prompt_rows.eos_rows(self, prompt_cache, inp[a:b], width)
            for w, box in boxes.items():
                got = box["out"]
                outs[w].append(got[torch.arange(b - a, device=got.device), ends[a:b].to(got.device)])
        return {w: torch.cat(v).float().cpu().numpy()[which] for w, v in outs.items()}

    @torch.inference_mode()
    def _last_attention(self, token_ids: Sequence[int]) -> torch.Tensor:
        """The last layer's attention (heads x query x key, float32) of `token_ids` run alone."""
        before = self.model.config._attn_implementation
        self.model.set_attn_implementation("eager")   # only eager returns attention weights
        try:
            out = self.model(input_ids=torch.tensor([list(token_ids)], device=self.device),
                             output_attentions=True)
        finally:
            self.model.set_attn_implementation(before)
        return out.attentions[-1][0].float()

    def _attention(self, token_ids: list[int]) -> list[float]:
        """DRAGIN's attention per generated token: last layer, over the generated tokens only,
        max over the later positions attending to it, then mean over heads (its "max" solver)."""
        if not token_ids:
            return []
        return self._last_attention(token_ids).max(dim=1).values.mean(dim=0).tolist()

    def attention_rows(self, token_ids: Sequence[int], positions: Sequence[int]) -> list[list[float]]:
        """The head-averaged last-layer attention rows of `token_ids` at `positions` (DRAGIN's query)."""
        if not positions:
            return []
        att = self._last_attention(token_ids).mean(dim=0)     # query x key
        return att[torch.tensor(list(positions), device=att.device)].tolist()

