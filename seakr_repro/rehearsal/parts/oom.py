"""oom: the out-of-memory retry under a cap the uncapped call goes over: it must run again in
fewer rows per pass, under the cap, with the uncapped call's tokens and vectors.

The card: the GPU under `torch.cuda.set_per_process_memory_fraction`; on a CPU, a simulated card
(doubles/simulated_card.py: the bytes of live tensors, torch.OutOfMemoryError over its cap; the
process's own where one is active). One SeaKR evaluation (k = 20 samples of a long prompt, a random
LLaMA with LLaMA-2-7B's vocabulary) runs uncapped (its peak: `uncapped_peak_bytes`), then with
k/2 rows per pass (the peak the retry reaches with one halving: `half_rows_peak_bytes`); each
capped run's cap lies between the two, so only a retry that lowers the peak fits. The report
gives each capped run's cap and, per attempt of the retry, the rows it asked, the widest pass it
ran, its peak bytes and its outcome. ok (verdicts._oom): a capped run retried, finished under its
cap, and gave the uncapped run's tokens.
"""
from __future__ import annotations

from ..device import is_cuda, model_dtype, peak_bytes, reset_peak
from ..stand_ins import tokenizer_dir

K = 20
CUDA_SLACK = 2**28          # 256 MiB above the cap's arithmetic on a GPU: the allocator's blocks


class Card:
    """What the part reads and caps: the GPU's torch allocator, or the simulated card."""

    def __init__(self, ctx):
        import torch

        from ...doubles import simulated_card

        self.ctx, self.cuda = ctx, is_cuda(ctx.device)
        self.sim, self.own_card = None, False
        if not self.cuda:       # the process's simulated card, else one of the part's own
            self.sim = simulated_card.active()
            if self.sim is None:
                self.sim, self.own_card = simulated_card.SimulatedCard(), True
                self.sim.__enter__()
            self.own_cap = self.sim.cap
        self.total = torch.cuda.get_device_properties(0).total_memory if self.cuda else None

    def allocated(self) -> int:
        import torch

        return int(torch.cuda.memory_allocated()) if self.cuda else self.sim.allocated

    def reset(self) -> None:
        if self.sim is not None:
            self.sim.reset_peak()
        else:
            reset_peak(self.ctx.device)

    def peak(self) -> int:
        return self.sim.peak if self.sim is not None else peak_bytes(self.ctx.device)

    def cap(self, n: int | None) -> None:
        """Cap torch at `n` bytes; None: back to the part's own cap."""
        import torch

        if not self.cuda:
            self.sim.cap = self.own_cap if n is None else n
        elif n is None:                 # card_memory.apply_cap's
            torch.cuda.set_per_process_memory_fraction(self.ctx.card.get("torch_fraction", 1.0))
        else:
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(min(n / self.total, 1.0))

    def close(self) -> None:
        if self.own_card:
            self.sim.__exit__(None, None, None)

    def describe(self) -> str:
        return ("torch.cuda.set_per_process_memory_fraction" if self.cuda else
                "a simulated card (doubles/simulated_card.py): the bytes of live tensors, "
                "torch.OutOfMemoryError over its cap")


def _same(got, ref) -> dict:
    return {"same_tokens": [s.token_ids for s in got.samples] == [s.token_ids for s in ref.samples],
            "max_abs_vector_diff": float(abs(got.vectors - ref.vectors).max())}


def run(ctx) -> dict:
    card = Card(ctx)
    try:
        return _run(ctx, card)
    finally:
        card.close()


def _run(ctx, card: Card) -> dict:
    import torch
    from transformers import AutoTokenizer

    from ...doubles.random_llama import LLAMA_2_VOCAB, random_llama
    from ...llm.hf.backend import HFBackend
    from ...llm.model_info import resolve_dtype
    from ...llm.sampling_settings import Sampling

    tok = AutoTokenizer.from_pretrained(tokenizer_dir(ctx.work))
    model = random_llama(ctx.shape, tok, ctx.device, resolve_dtype(model_dtype(ctx.device)),
                         vocab_size=LLAMA_2_VOCAB)
    if card.sim is not None:
        card.sim.hold(model)
    words = ("Question: Who directed the film? Answer: The film was directed by Ada. " * 300).split()
    prompt = tok.decode(tok(" ".join(words))["input_ids"][:1500 if ctx.paper_shape else 300], skip_special_tokens=True)
    args = Sampling(k=K, max_new_tokens=100 if ctx.paper_shape else 20, seed=42,
                    layer=model.config.num_hidden_layers // 2 - 1, hook="mlp_out")

    def fresh(rows: int | None = None):
        be = HFBackend(model, tok, "oom-rehearsal", prefix_cache_tokens=0)
        be.rows_per_forward = rows
        return be

    def measured(be):
        card.reset()
        got = be.sample(prompt, args)
        return got, card.peak()

    weights = card.allocated()
    ref, need = measured(fresh())
    ctx.watch.sample("after the uncapped run")
    half, floor = measured(fresh(K // 2))
    out: dict = {"k": K, "prompt_tokens": len(tok(prompt)["input_ids"]), "vocab": model.config.vocab_size,
                 "forced_by": card.describe(), "weights_bytes": weights, "uncapped_peak_bytes": need,
                 "half_rows_peak_bytes": floor, "half_rows": {"rows_per_forward": K // 2, **_same(half, ref)},
                 "runs": []}
    ctx.partial(out)
    if floor >= need:
        out["retry_path_ran"] = False
        out["why"] = "passes of k/2 rows peak no lower than the uncapped call: no cap leaves the retry room"
        return out
    slack = CUDA_SLACK if card.cuda else 0
    for frac in (0.6, 0.3):
        cap = floor + slack + int(frac * (need - floor))
        be = fresh()
        be.oom.attempts = []
        be.oom.before_attempt = card.reset
        be.oom.after_attempt = lambda rec: rec.update(peak_bytes=card.peak())
        entry: dict = {"cap_bytes": cap, "cap_fraction": frac, "attempts": be.oom.attempts}
        card.cap(cap)
        try:
            got = be.sample(prompt, args)
            entry.update(ok=True, **_same(got, ref))
        except torch.OutOfMemoryError as e:
            entry.update(ok=False, error=str(e)[:300])
        finally:
            card.cap(None)
        entry.update(oom_retries=be.stats()["oom_retries"], rows_per_forward=be.rows_per_forward)
        done = [a for a in entry["attempts"] if a["outcome"] == "ok"]
        entry["peak_bytes"] = done[-1]["peak_bytes"] if done else None
        out["runs"].append(entry)
        ctx.partial(out)
        if entry["ok"] and entry["oom_retries"]:
            break
    out["retry_path_ran"] = any(r["ok"] and r["oom_retries"] and r["same_tokens"] and r["peak_bytes"] <= r["cap_bytes"]
                                < need for r in out["runs"])
    return out
