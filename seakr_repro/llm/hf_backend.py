"""The transformers backend (reference implementation, CPU and GPU).

Our own decode loop with a KV cache, shared by `generate` (greedy) and `sample` (k samples):
- `sample` pre-fills the prompt ONCE, copies its cache to k rows and decodes the k samples as one
  batch (plain `generate(num_return_sequences=k)` pre-fills the prompt k times, which dominates
  with a 10-shot prompt). Finished rows are dropped from the batch. All rows share one length, so
  no padding or attention mask is needed while decoding.
- The forced-EOS vectors come from ONE more batched pass of each sample's forced-EOS sequence
  (`stops.forced_eos_ids`: the last token replaced by EOS, or EOS after the kept tokens) on top
  of the pristine prompt cache, right-padded. Attention is causal, so a row's EOS
  never sees the padding after it: no padding leaks into a vector.
- Stop strings are searched in the generated text only (as vLLM, the official engine, does).
  The returned text is cut before the stop string; token lists keep the tokens whose text lies
  entirely before it; `all_token_ids` keeps every generated token (see `stops`).
- Prompts are pre-filled in fixed chunks of PREFILL_CHUNK tokens, and the KV cache at each chunk
  boundary is kept (LRU, bounded in tokens) keyed by the token ids before it. Every prompt of a
  method starts with the same few-shot demonstrations, so later calls pre-fill only their own tail
  (the prefix caching vLLM does). Because a chunk is computed by the same operation whether it
  comes from the cache or not, results do not depend on what was called before: same prompt and
  seed, same bits.
- Log-probabilities, entropies and logsumexp are those of the model's raw next-token distribution
  (temperature 1, no top-k/top-p), whatever the sampling parameters were; samples also carry
  `warped_logprobs`, from the very logits the sampler drew from.
- Texts and token strings are decoded after the prompt's last tokens (`tokenizing.decode_pieces`),
  as vLLM does, so a sentencepiece (LLaMA) continuation keeps its leading space.
- `max_context` (the config's max_position_embeddings): a prompt that does not fit with the
  tokens to generate is refused (`tokenizing.ContextOverflowError`), never run past it.
"""
from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .base import Generation, SampleSet
from .hooks import capture, run_until_captured
from .registry import middle_layer
from .sampling import sample_tokens
from .stops import check_forced_eos, cut_at_stop, find_stop, forced_eos_of, stop_end
from .attention import WordsMixin
from .tokenizing import TokenizerMixin, check_fits

PREFILL_CHUNK = 128          # tokens per pre-fill chunk (the unit of prefix reuse)


class _Row:
    """The growing state of one sequence during decoding."""

    __slots__ = ("ids", "logprobs", "entropies", "lse", "wlp", "finish")

    def __init__(self):
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.entropies: list[float] = []
        self.lse: list[float] = []
        self.wlp: list[float] = []           # warped log-probs (samples)
        self.finish: str | None = None


class HFBackend(WordsMixin, TokenizerMixin):
    """`Backend` over a transformers causal LM. Build it with `from_dir` or `registry.load_backend`."""

    def __init__(self, model, tokenizer, name: str, fingerprint: str = "",
                 max_batch_rows: int | None = None, prefix_cache_tokens: int = 16384):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.fingerprint = fingerprint or name
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.n_layers = int(cfg.num_hidden_layers)
        self.hidden_size = int(cfg.hidden_size)
        eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else cfg.eos_token_id
        self.eos_token_id = int(eos[0] if isinstance(eos, (list, tuple)) else eos)
        self.device = next(model.parameters()).device
        # the context the model was trained for: longer prompts are refused (check_fits), not
        # run past it (the methods drop passages and demonstrations first: prompts.fit_prompt)
        n_ctx = getattr(cfg, "max_position_embeddings", None)
        self.max_context: int | None = int(n_ctx) if n_ctx else None
        # Rows decoded together in `sample`: None = all k. A 7B model on a 24 GB card cannot hold
        # 20 copies of a long prompt's KV cache; smaller chunks trade speed for memory.
        self.max_batch_rows = max_batch_rows
        # Chunk-boundary KV caches: key = hash of the token ids before the boundary. Bounded by
        # the total tokens they hold (a 7B model's KV is ~0.5 MB per token in bf16).
        self.prefix_cache_tokens = int(prefix_cache_tokens)
        self._prefix: "OrderedDict[bytes, tuple[int, object]]" = OrderedDict()
        self.prefix_hits = 0

    @classmethod
    def from_dir(cls, path: str | Path, *, name: str, device: str = "cpu",
                 dtype: torch.dtype = torch.float32, max_batch_rows: int | None = None,
                 prefix_cache_tokens: int = 16384) -> "HFBackend":
        from transformers import AutoModelForCausalLM, AutoTokenizer
        path = Path(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
        return cls(model, tok, name, _fingerprint(path, dtype), max_batch_rows, prefix_cache_tokens)

    def close(self) -> None:
        """Drop the model and its kept KV caches so their (GPU) memory can be freed; the
        backend is unusable afterwards (`experiments.BackendPool` loads a new one)."""
        self._prefix.clear()
        self.model = None

    # ----------------------------------------------------------------------------- helpers
    def reset_prefix_cache(self) -> None:
        """Forget the kept chunk-boundary KV caches (benchmarks start every run cold)."""
        self._prefix.clear()

    def _forward(self, ids: torch.Tensor, cache=None):
        # logits of the last position only: the LM head over a whole prompt costs as much as
        # several layers and its other rows are never used
        return self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)

    @torch.inference_mode()
    def _prefill(self, prompt_ids: list[int]):
        """KV cache and next-token logits of a prompt, reusing cached chunk boundaries."""
        ids = list(prompt_ids)
        last_boundary = (len(ids) - 1) // PREFILL_CHUNK * PREFILL_CHUNK   # >= 1 token stays for the tail
        cache, start = None, 0
        for b in range(last_boundary, 0, -PREFILL_CHUNK):
            hit = self._prefix.get(_ids_key(ids[:b]))
            if hit is not None:
                self._prefix.move_to_end(_ids_key(ids[:b]))
                cache, start = copy.deepcopy(hit[1]), b
                self.prefix_hits += 1
                break
        for b in range(start, last_boundary, PREFILL_CHUNK):
            chunk = torch.tensor([ids[b:b + PREFILL_CHUNK]], device=self.device)
            cache = self._forward(chunk, cache).past_key_values
            self._remember(ids[:b + PREFILL_CHUNK], cache)
        out = self._forward(torch.tensor([ids[last_boundary:]], device=self.device), cache)
        return out.past_key_values, out.logits[:, -1, :]

    def _remember(self, ids: list[int], cache) -> None:
        if self.prefix_cache_tokens <= 0:
            return
        self._prefix[_ids_key(ids)] = (len(ids), copy.deepcopy(cache))
        while sum(n for n, _ in self._prefix.values()) > self.prefix_cache_tokens and len(self._prefix) > 1:
            self._prefix.popitem(last=False)

    def _find_stop(self, text: str, stop: Sequence[str]) -> int:
        return find_stop(text, stop)

    # ----------------------------------------------------------------------------- decoding
    @torch.inference_mode()
    def _decode_rows(self, cache, logits: torch.Tensor, n_rows: int, max_new_tokens: int,
                     stop: Sequence[str], pick: Callable[[torch.Tensor], torch.Tensor],
                     want_stats: bool) -> list[_Row]:
        """Decode n_rows sequences from `cache` (already n_rows wide) and next-token `logits`."""
        rows = [_Row() for _ in range(n_rows)]
        active = list(range(n_rows))          # row index of each batch position of the cache
        if max_new_tokens <= 0:
            for r in rows:
                r.finish = "length"
            return rows
        while True:
            logits = logits.float()
            logp = torch.log_softmax(logits, dim=-1)
            nxt = pick(logits)
            nxt, wlp = nxt if isinstance(nxt, tuple) else (nxt, None)   # samples: + warped log-prob
            wlp = wlp.tolist() if wlp is not None else None
            chosen = logp.gather(1, nxt[:, None])[:, 0].tolist()
            if want_stats:
                ent = (-(logp.exp() * logp).nan_to_num().sum(-1)).tolist()
                lse = torch.logsumexp(logits, dim=-1).tolist()
            keep = []
            for j, (ri, t) in enumerate(zip(active, nxt.tolist())):
                r = rows[ri]
                if t == self.eos_token_id:
                    r.finish = "eos"          # EOS ends the text and is not part of it
                    continue
                r.ids.append(t)
                r.logprobs.append(chosen[j])
                if wlp is not None:
                    r.wlp.append(wlp[j])
                if want_stats:
                    r.entropies.append(ent[j])
                    r.lse.append(lse[j])
                if stop and self._find_stop(self._decode(r.ids), stop) >= 0:
                    r.finish = "stop"
                elif len(r.ids) >= max_new_tokens:
                    r.finish = "length"
                else:
                    keep.append(j)
            if not keep:
                return rows
            if len(keep) < len(active):       # drop finished rows from the batch and the cache
                idx = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(idx)
                nxt = nxt[idx]
                active = [active[j] for j in keep]
            logits = self._forward(nxt[:, None], cache).logits[:, -1, :]

    def _finish(self, r: _Row, stop: Sequence[str], prompt_ids: Sequence[int],
                want_stats: bool) -> Generation:
        """Cut a decoded row before its stop string and build the Generation; text and tokens
        are decoded after the prompt's last tokens (`tokenizing.decode_pieces`), as vLLM does."""
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
            logsumexp=r.lse[:n] if want_stats else None,
            finish_reason=finish, n_prompt_tokens=len(prompt_ids),
            all_token_ids=list(r.ids[:end]), all_logprobs=list(r.logprobs[:end]),
            warped_logprobs=list(r.wlp[:end]) if r.wlp else None)

    # ----------------------------------------------------------------------------- protocol
    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        ids = self._encode(prompt)
        check_fits(len(ids), max(0, max_new_tokens), self.max_context, self.name)
        cache, logits = self._prefill(ids)
        row = self._decode_rows(cache, logits, 1, max_new_tokens, stop,
                                lambda lg: lg.argmax(-1), want_stats)[0]
        gen = self._finish(row, stop, ids, want_stats)
        if want_attention:
            gen.attention = self._attention(gen.token_ids)
        return gen

    def sample(self, prompt: str, *, k: int, max_new_tokens: int, stop: Sequence[str] = (),
               temperature: float = 1.0, top_k: int = 50, top_p: float = 0.9, seed: int = 42,
               layer: int | None = None, hook: str = "mlp_out",
               want_stats: bool = False, forced_eos: str = "append") -> SampleSet:
        layer = middle_layer(self.n_layers) if layer is None else int(layer)
        check_forced_eos(forced_eos)
        ids = self._encode(prompt)
        # + 1: the forced EOS after the longest completion
        check_fits(len(ids), max(0, max_new_tokens) + 1, self.max_context, self.name)
        prompt_cache, logits = self._prefill(ids)
        gen = torch.Generator(device=self.device).manual_seed(int(seed))

        def pick(lg):
            return sample_tokens(lg, temperature, top_k, top_p, gen)

        samples: list[Generation] = []
        vectors: list[np.ndarray] = []
        chunk = self.max_batch_rows or k
        for start in range(0, k, chunk):
            n = min(chunk, k - start)
            cache = _repeat(prompt_cache, n)
            rows = self._decode_rows(cache, logits.expand(n, -1), n, max_new_tokens, stop,
                                     pick, want_stats)
            del cache
            part = [self._finish(r, stop, ids, want_stats) for r in rows]
            # each row's forced-EOS sequence minus its EOS, which _eos_vectors appends
            seqs = [forced_eos_of(g, self.eos_token_id, forced_eos)[:-1] for g in part]
            vectors.append(self._eos_vectors(prompt_cache, seqs, layer, hook))
            samples.extend(part)
        vec = np.concatenate(vectors) if vectors else np.zeros((0, self.hidden_size), np.float32)
        return SampleSet(samples=samples, vectors=vec, layer=layer, hook=hook)

    def sample_many(self, prompts: Sequence[str], **kwargs) -> list[SampleSet]:
        return [self.sample(p, **kwargs) for p in prompts]

    @torch.inference_mode()
    def score(self, prompt: str, continuation: str) -> Generation:
        p_ids = self._encode(prompt)
        c_ids = self._encode_continuation(continuation)
        if not c_ids:
            return Generation(text=continuation, entropies=[], logsumexp=[],
                              n_prompt_tokens=len(p_ids))
        check_fits(len(p_ids) + len(c_ids), 0, self.max_context, self.name)
        ids = torch.tensor([p_ids + c_ids], device=self.device)
        logits = self.model(input_ids=ids).logits[0, len(p_ids) - 1:-1].float()
        logp = torch.log_softmax(logits, dim=-1)
        tgt = torch.tensor(c_ids, device=self.device)
        return Generation(
            text=continuation, token_ids=list(c_ids), tokens=self._pieces(c_ids, p_ids),
            logprobs=logp.gather(1, tgt[:, None])[:, 0].tolist(),
            entropies=(-(logp.exp() * logp).nan_to_num().sum(-1)).tolist(),
            logsumexp=torch.logsumexp(logits, dim=-1).tolist(),
            finish_reason="stop", n_prompt_tokens=len(p_ids))

    # ----------------------------------------------------------------------------- vectors
    @torch.inference_mode()
    def _eos_vectors(self, prompt_cache, completions: list[list[int]], layer: int,
                     hook: str) -> np.ndarray:
        """Vector at the EOS of "prompt + completion + EOS", one batched pass for all rows."""
        n = len(completions)
        width = max(len(c) for c in completions) + 1
        # Right padding with EOS: causal attention keeps it invisible to each row's own EOS.
        inp = torch.full((n, width), self.eos_token_id, dtype=torch.long)
        for i, c in enumerate(completions):
            inp[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        cache = _repeat(prompt_cache, n)
        with capture(self.model, layer, hook, stop_after=True) as box:
            run_until_captured(self.model.model, input_ids=inp.to(self.device),
                               past_key_values=cache, use_cache=True)
        pos = torch.tensor([len(c) for c in completions], device=box["out"].device)
        out = box["out"][torch.arange(n, device=pos.device), pos]
        return out.float().cpu().numpy()

    @torch.inference_mode()
    def _last_attention(self, token_ids: Sequence[int]) -> torch.Tensor:
        """The last layer's attention weights (heads x query x key, float32) of `token_ids` run
        alone through the model."""
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
        """Rows of the head-averaged last-layer attention of `token_ids` at `positions` (DRAGIN's
        query formulation reads these for the tokens that triggered retrieval)."""
        if not positions:
            return []
        att = self._last_attention(token_ids).mean(dim=0)     # query x key
        return att[torch.tensor(list(positions), device=att.device)].tolist()


def _ids_key(ids: Sequence[int]) -> bytes:
    return hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def _repeat(cache, n: int):
    """A copy of a batch-1 KV cache with n identical rows (the original stays untouched)."""
    out = copy.deepcopy(cache)
    if n > 1:
        out.batch_repeat_interleave(n)
    return out


def _fingerprint(path: Path, dtype) -> str:
    """Identify the weights cheaply: config, file names, sizes and the first/last MiB of each."""
    h = hashlib.sha256(str(dtype).encode())
    cfg = path / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]
