"""oom: the out-of-memory retry, forced by a memory cap below what k = 20 rows need and above what
one row needs (`torch.cuda.set_per_process_memory_fraction`): retries counted, and the tokens
equal to the uncapped run's. On a CPU there is no cap: the error is injected into the model's
forward pass for passes of more than k/4 rows (the report says so). ok (verdicts._oom): a retry
ran and gave the uncapped run's tokens.
"""
from __future__ import annotations

from ..fixtures import is_cuda, model_dtype, reset_peak, tokenizer_dir

K = 20


def _inject(backend, k: int) -> None:
    """On a CPU: an out-of-memory error from every forward pass of more than k/4 rows, raised
    after the pass ran (as a real one is: part way through the work)."""
    import torch

    def capped(ids, cache=None, position_ids=None):
        out = real(ids, cache, position_ids)
        if ids.shape[0] > k // 4:
            raise torch.OutOfMemoryError("rehearsal: injected out-of-memory")
        return out
    real, backend.forward = backend.forward, capped


def run(ctx) -> dict:
    import torch
    from transformers import AutoTokenizer

    from ...doubles.random_llama import random_llama
    from ...llm.hf.backend import HFBackend
    from ...llm.model_info import resolve_dtype

    cuda = is_cuda(ctx.device)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(ctx.work))
    model = random_llama(ctx.shape, tok, ctx.device, resolve_dtype(model_dtype(ctx.device)))
    words = ("Question: Who directed the film? Answer: The film was directed by Ada. " * 300).split()
    prompt = tok.decode(tok(" ".join(words))["input_ids"][:1500 if ctx.paper_shape else 300], skip_special_tokens=True)
    args = dict(k=K, max_new_tokens=100 if ctx.paper_shape else 20, seed=42,
                layer=model.config.num_hidden_layers // 2 - 1, hook="mlp_out")
    fresh = lambda: HFBackend(model, tok, "oom-rehearsal", prefix_cache_tokens=0)   # noqa: E731
    reset_peak(ctx.device)
    base = torch.cuda.memory_allocated() if cuda else 0
    ref = fresh().sample(prompt, **args)
    ctx.watch.sample("after the uncapped run")
    out: dict = {"k": K, "prompt_tokens": len(tok(prompt)["input_ids"]), "attempts": []}
    if cuda:
        need = torch.cuda.max_memory_allocated() - base
        total = torch.cuda.get_device_properties(0).total_memory
        # what ONE row needs (the prompt's pre-fill and KV cache): the retry can go no lower, so
        # every cap leaves it
        reset_peak(ctx.device)
        fresh().sample(prompt, **{**args, "k": 1})
        one = torch.cuda.max_memory_allocated() - base
        out.update(forced_by="torch.cuda.set_per_process_memory_fraction", weights_gb=round(base / 2**30, 2),
                   uncapped_extra_gb=round(need / 2**30, 2), one_row_extra_gb=round(one / 2**30, 2))
        fracs = (0.6, 0.45, 0.3, 0.2)
    else:
        out["forced_by"] = (f"injected: torch.OutOfMemoryError after passes of more than {K // 4} rows "
                            "(a CPU has no cap)")
        fracs = (None,)
    for frac in fracs:
        be = fresh()
        att: dict = {}
        if frac is not None:
            torch.cuda.empty_cache()
            cap = base + one + 2**28 + frac * max(need - one, 0)       # + 256 MiB: the allocator's blocks
            att["cap_gb"] = round(cap / 2**30, 2)
            torch.cuda.set_per_process_memory_fraction(min(cap / total, 1.0))
        else:
            _inject(be, K)
        try:
            got = be.sample(prompt, **args)
            att.update(ok=True, oom_retries=be.stats()["oom_retries"], rows_per_forward=be.rows_per_forward,
                       same_tokens=[s.token_ids for s in got.samples] == [s.token_ids for s in ref.samples],
                       max_abs_vector_diff=float(abs(got.vectors - ref.vectors).max()))
        except torch.OutOfMemoryError as e:
            att.update(ok=False, error=str(e)[:300], oom_retries=be.stats()["oom_retries"])
        finally:
            if frac is not None:        # back to the part's own cap (card_memory.apply_cap)
                torch.cuda.set_per_process_memory_fraction(ctx.card.get("torch_fraction", 1.0))
        out["attempts"].append(att)
        ctx.partial(out)
        if att.get("ok") and att["oom_retries"]:
            break
    out["retry_path_ran"] = any(t.get("ok") and t["oom_retries"] and t["same_tokens"] for t in out["attempts"])
    return out
