"""The worker side of the vLLM backend: forward hooks that read hidden states out of vLLM, no fork.

These functions run INSIDE vLLM's workers (`LLM.collective_rpc` calls them with the worker first;
module-level, they travel by reference) and install forward hooks on its model (`llm.hooks`):

- "vec"   a layer's MLP output or residual stream at the LAST token of a request (with "prompt +
          completion + EOS": SeaKR's forced-EOS vector);
- "stats" entropy and logsumexp of each next-token distribution, read off the logits; with
          "warp": [temperature, top_k, top_p] also the logsumexp of the warped logits;
- "hidden" the final (normed) hidden states of every position, turned into teacher-forced
          log-probabilities by `fetch` (`score`);
- "all"   every layer's "vec" at the last token (step 02's vectors);
- "attention" DRAGIN's attention: the last layer's softmax(q k^T) over the request's own tokens,
          max over query positions, summed over this worker's heads; with "rows", the rows of
          chosen query positions instead (DRAGIN's query formulation).

A request asks for a capture through `SamplingParams.extra_args["seakr"]` (its tag and what to
keep); the model runner's `input_batch.req_ids` and `query_start_loc` say which rows of vLLM's flat
batch are its own (docs/vllm.md, "Hidden states without a fork"). The model must run eagerly
(`enforce_eager=True`): a compiled model never calls Python hooks.
"""
from __future__ import annotations

from typing import Any

import torch

from ..hooks import HOOKS, decoder_layers, hook_module, hooked_vector
from ..sampling import token_stats, warped_logsumexp

KEY = "seakr"        # SamplingParams.extra_args key that marks a request for capture


class _Capture:
    """Per-worker state: installed hooks and what they stored, by request tag."""

    def __init__(self, worker):
        self.runner = worker.model_runner
        self.model = self.runner.get_model() if hasattr(self.runner, "get_model") else self.runner.model
        self.store: dict[str, dict[str, Any]] = {}
        self.handles: dict[tuple, Any] = {}
        self._rows: list | None = None
        self.fetching = False        # compute_logits in `fetch` must not feed the stats hook
        # the tagged rows are looked up once per forward (many hooks read them); reset before
        # the first decoder layer, since vLLM's model wrapper may call the inner model's forward
        # directly, without firing its hooks
        self.handles[("rows",)] = decoder_layers(self.model)[0].register_forward_pre_hook(self._reset_rows)

    def _reset_rows(self, *_args) -> None:
        self._rows = None

    def tagged(self) -> list[tuple[int, dict, int, int]]:
        """(batch index, capture spec, first row, end row) of the tagged requests in this forward."""
        if self._rows is None:
            self._rows = self._tagged()
        return self._rows

    def _tagged(self) -> list[tuple[int, dict, int, int]]:
        r = self.runner
        n = r.input_batch.num_reqs
        if n == 0:
            return []
        ids = r.input_batch.req_ids[:n]
        qsl = r.query_start_loc.np[: n + 1]
        out = []
        for i, rid in enumerate(ids):
            state = r.requests.get(rid)
            sp = state.sampling_params if state is not None else None
            extra = sp.extra_args if sp is not None else None
            if extra and KEY in extra:
                out.append((i, extra[KEY], int(qsl[i]), int(qsl[i + 1])))
        return out

    def slot(self, tag: str) -> dict[str, Any]:
        return self.store.setdefault(tag, {})

    def ensure_vec(self, layer: int, hook: str) -> None:
        key = ("vec", layer, hook)
        if key in self.handles:
            return
        module = hook_module(self.model, layer, hook)
        want = [layer, hook]

        def _hook(_m, _inp, out):
            rows = self.tagged()
            if not rows:
                return
            out = hooked_vector(out, hook, deferred_residual=True)
            for _i, spec, start, end in rows:
                if end <= start:
                    continue
                # chunked prefill calls this once per chunk: the last chunk's last row wins.
                # A copy, not a view (on the CPU .float().cpu() returns the tensor itself): the
                # next layer's add-norm may work in place (`fused_add_rms_norm.maybe_inplace`)
                if spec.get("vec") == want:
                    self.slot(spec["tag"])["vec"] = out[end - 1].float().cpu().clone()
                if spec.get("all"):
                    self.slot(spec["tag"]).setdefault("all", {})[(layer, hook)] = out[end - 1].float().cpu().clone()

        self.handles[key] = module.register_forward_hook(_hook)

    def ensure_stats(self) -> None:
        if ("stats",) in self.handles:
            return

        def _hook(_m, _inp, logits):
            if logits is None or self.fetching:   # TP ranks other than 0 get no logits
                return
            rows = self.tagged()
            if not rows:
                return
            # one logits row per request, in batch order (no speculative decoding here)
            for i, spec, _s, _e in rows:
                if spec.get("stats") and i < logits.shape[0]:
                    lg = logits[i].float()
                    _logp, ent, logsumexp = token_stats(lg)
                    row = (float(ent), float(logsumexp))
                    if spec.get("warp") and spec["warp"][0] > 0:   # temperature 0: raw
                        row += (float(warped_logsumexp(lg[None], *spec["warp"])[0]),)
                    self.slot(spec["tag"]).setdefault("stats", []).append(row)

        self.handles[("stats",)] = self.model.logits_processor.register_forward_hook(_hook)

    def ensure_hidden(self) -> None:
        if ("hidden",) in self.handles:
            return
        norm = _inner(self.model).norm

        def _hook(_m, _inp, out):
            rows = self.tagged()
            if not rows:
                return
            h = out[0] if isinstance(out, tuple) else out
            for _i, spec, start, end in rows:
                if spec.get("hidden"):
                    self.slot(spec["tag"]).setdefault("hidden", []).append(h[start:end].detach().clone())

        self.handles[("hidden",)] = norm.register_forward_hook(_hook)

    def ensure_all(self) -> None:
        """Vectors of every layer at both hooks, for requests tagged "all"."""
        for layer in range(len(decoder_layers(self.model))):
            for hook in HOOKS:
                self.ensure_vec(layer, hook)

    def ensure_attention(self) -> None:
        """DRAGIN's attention from the last layer's attention op inputs (q, k after rotary)."""
        if ("attention",) in self.handles:
            return
        self_attn = decoder_layers(self.model)[-1].self_attn
        attn = self_attn.attn
        n_heads, n_kv = int(self_attn.num_heads), int(self_attn.num_kv_heads)
        head_dim = int(self_attn.head_dim)
        scale = float(getattr(attn, "scale", None) or getattr(self_attn, "scaling", head_dim ** -0.5))

        def _hook(_m, args, kwargs):
            q, k = (args[0], args[1]) if len(args) >= 2 else (kwargs["query"], kwargs["key"])
            for _i, spec, start, end in self.tagged():
                if end <= start:
                    continue
                t = end - start
                if spec.get("attention"):
                    qq = q[start:end].float().reshape(t, n_heads, head_dim).transpose(0, 1)
                    kk = k[start:end].float().reshape(t, n_kv, head_dim).transpose(0, 1)
                    kk = kk.repeat_interleave(n_heads // n_kv, dim=0)
                    scores = (qq @ kk.transpose(1, 2)) * scale            # heads x query x key
                    causal = torch.ones(t, t, dtype=torch.bool, device=scores.device).triu(1)
                    att = scores.masked_fill(causal, float("-inf")).softmax(dim=-1)
                    # max over the query positions, then summed over this worker's heads; the
                    # caller divides by the total head count over all workers (tensor parallel)
                    self.slot(spec["tag"])["attention"] = (att.max(dim=1).values.sum(dim=0).cpu(), n_heads)
                if spec.get("rows") is not None:
                    attention_rows(self.slot(spec["tag"]), spec["rows"], q[start:end], k[start:end],
                                   n_heads, n_kv, head_dim, scale)

        self.handles[("attention",)] = attn.register_forward_pre_hook(_hook, with_kwargs=True)


def attention_rows(slot: dict, rows, q: torch.Tensor, k: torch.Tensor, n_heads: int, n_kv: int,
                   head_dim: int, scale: float) -> None:
    """One request's last-layer attention at query positions `rows`, summed over this worker's
    heads. A chunked prefill calls this once per chunk, in order; the slot keeps earlier chunks'
    keys, so a row always sees every key before it."""
    t = q.shape[0]
    kk = k.float().reshape(t, n_kv, head_dim).transpose(0, 1).repeat_interleave(n_heads // n_kv, dim=0)
    keys = slot.get("_keys")
    keys = kk if keys is None else torch.cat([keys, kk], dim=1)    # heads x (all keys so far) x d
    slot["_keys"] = keys
    first = keys.shape[1] - t                   # absolute position of this chunk's first token
    want = [int(p) for p in rows if first <= int(p) < first + t]
    if not want:
        return
    idx = torch.tensor([p - first for p in want], device=q.device)
    qq = q.float().reshape(t, n_heads, head_dim).transpose(0, 1)[:, idx]          # heads x w x d
    scores = (qq @ keys.transpose(1, 2)) * scale                                   # heads x w x K
    pos = torch.tensor(want, device=q.device)[:, None]
    later = torch.arange(keys.shape[1], device=q.device)[None, :] > pos           # w x K
    att = scores.masked_fill(later, float("-inf")).softmax(dim=-1).sum(dim=0).cpu()
    got = slot.setdefault("rows", {})
    for j, p in enumerate(want):
        got[p] = att[j]
    slot["heads"] = n_heads


def _inner(model):
    return getattr(model, "model", model)


def _capture(worker) -> _Capture:
    cap = getattr(worker, "_seakr_capture", None)
    if cap is None:
        cap = worker._seakr_capture = _Capture(worker)
    return cap


# ---------------------------------------------------------------------- RPC entry points
def install(worker, what: list) -> bool:
    """Install the hooks `what` lists: ("vec", layer, hook) | ("stats",) | ("hidden",) |
    ("all",) | ("attention",)."""
    cap = _capture(worker)
    for item in what:
        if item[0] == "vec":
            cap.ensure_vec(int(item[1]), str(item[2]))
        elif item[0] == "stats":
            cap.ensure_stats()
        elif item[0] == "hidden":
            cap.ensure_hidden()
        elif item[0] == "all":
            cap.ensure_all()
        elif item[0] == "attention":
            cap.ensure_attention()
        else:
            raise ValueError(f"unknown capture {item!r}")
    return True


@torch.inference_mode()
def fetch(worker, tags: list[str], score: dict | None = None) -> dict[str, dict]:
    """Pop what was captured for `tags` (as numpy / floats). `score` maps a tag to (n_prompt,
    continuation ids): its final hidden states become the continuation's log-probs and statistics."""
    cap = _capture(worker)
    cap.fetching = True
    try:
        return _fetch(cap, tags, score)
    finally:
        cap.fetching = False


def _fetch(cap: _Capture, tags: list[str], score: dict | None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for tag in tags:
        got = cap.store.pop(tag, {})
        item: dict[str, Any] = {}
        if "vec" in got:
            item["vec"] = got["vec"].numpy()
        if "stats" in got:
            item["stats"] = got["stats"]
        if "all" in got:
            item["all"] = {f"{layer}:{hook}": v.numpy() for (layer, hook), v in got["all"].items()}
        if "attention" in got:
            summed, heads = got["attention"]
            item["attention"] = (summed.numpy(), heads)
        if "rows" in got:
            # a row from an early prefill chunk saw only the keys so far: the rest are 0 (causal);
            # the kept keys ("_keys") stay behind
            n = got["_keys"].shape[1]
            item["rows"] = ({p: torch.nn.functional.pad(r, (0, n - r.shape[0])).numpy()
                             for p, r in got["rows"].items()}, got["heads"])
        if "hidden" in got and score and tag in score:
            n_prompt, cont, *reads = score[tag]     # reads: [(row, token)] (read_logprobs)
            h = torch.cat(got["hidden"])[n_prompt - 1: n_prompt - 1 + len(cont)]
            logits = cap.model.compute_logits(h)
            if logits is not None:
                logp, ent, logsumexp = token_stats(logits.float())
                tgt = torch.tensor(cont, device=logits.device)
                item["logprobs"] = logp.gather(1, tgt[:, None])[:, 0].tolist()
                item["entropies"], item["logsumexp"] = ent.tolist(), logsumexp.tolist()
                if reads:
                    item["reads"] = [float(logp[j, t]) for j, t in reads[0]]
        out[tag] = item
    return out


def drop(worker, tags: list[str]) -> bool:
    """Forget captures of requests that failed or were aborted."""
    cap = _capture(worker)
    for tag in tags:
        cap.store.pop(tag, None)
    return True
