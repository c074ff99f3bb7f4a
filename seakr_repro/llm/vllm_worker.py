"""The worker side of the vLLM backend: forward hooks that read hidden states out of vLLM, no fork.

These functions run INSIDE vLLM's workers (sent with `LLM.collective_rpc`, which calls them with
the worker as first argument; they are module-level so they travel by reference). They install
forward hooks on the worker's model, exactly like the transformers backend's hooks:

- "vec"   a layer's MLP output or residual stream at the LAST token of a request: with the request
          "prompt + completion + EOS" that is SeaKR's forced-EOS vector;
- "stats" entropy and logsumexp of each next-token distribution a request is sampled from (FLARE,
          LN-entropy, energy), read off the logits;
- "hidden" the final (normed) hidden states of every position of a request, turned into
          teacher-forced log-probabilities by `fetch` (`score`).

vLLM packs the tokens of all scheduled requests into one flat batch. The model runner's
`input_batch.req_ids` and `query_start_loc` say which rows belong to which request in the forward
being run, and a request asks for a capture through `SamplingParams.extra_args["seakr"]`
(its tag and what to keep), so requests from any caller can share a batch. The model must run
eagerly (`enforce_eager=True`): a compiled or CUDA-graph-captured model never calls Python hooks.
"""
from __future__ import annotations

from typing import Any

import torch

KEY = "seakr"        # SamplingParams.extra_args key that marks a request for capture


class _Capture:
    """Per-worker state: installed hooks and what they stored, by request tag."""

    def __init__(self, worker):
        self.runner = worker.model_runner
        self.model = self.runner.get_model() if hasattr(self.runner, "get_model") else self.runner.model
        self.store: dict[str, dict[str, Any]] = {}
        self.handles: dict[tuple, Any] = {}

    # ------------------------------------------------------------------ batch layout
    def tagged(self) -> list[tuple[int, dict, int, int]]:
        """(batch index, capture spec, first row, end row) of the tagged requests in this forward."""
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

    # ------------------------------------------------------------------ hooks
    def ensure_vec(self, layer: int, hook: str) -> None:
        key = ("vec", layer, hook)
        if key in self.handles:
            return
        layers = _decoder_layers(self.model)
        if not 0 <= layer < len(layers):
            raise ValueError(f"layer {layer} is outside 0..{len(layers) - 1}")
        module = layers[layer].mlp if hook == "mlp_out" else layers[layer]
        want = [layer, hook]

        def _hook(_m, _inp, out):
            rows = self.tagged()
            if not rows:
                return
            # vLLM's decoder layers return (hidden, residual) with the residual add deferred to
            # the next layer's norm: the residual stream after this layer is their sum.
            if isinstance(out, tuple):
                h, res = out[0], (out[1] if len(out) > 1 else None)
                out = h + res if (hook == "residual" and res is not None) else h
            for _i, spec, start, end in rows:
                if spec.get("vec") == want and end > start:
                    # chunked prefill calls this once per chunk: the last chunk's last row wins
                    self.slot(spec["tag"])["vec"] = out[end - 1].float().cpu()

        self.handles[key] = module.register_forward_hook(_hook)

    def ensure_stats(self) -> None:
        if ("stats",) in self.handles:
            return

        def _hook(_m, _inp, logits):
            if logits is None:          # tensor-parallel ranks other than 0 get no logits
                return
            rows = self.tagged()
            if not rows:
                return
            # one logits row per request, in batch order (no speculative decoding here)
            for i, spec, _s, _e in rows:
                if spec.get("stats") and i < logits.shape[0]:
                    lg = logits[i].float()
                    logp = torch.log_softmax(lg, dim=-1)
                    ent = float(-(logp.exp() * logp).nan_to_num().sum())
                    lse = float(torch.logsumexp(lg, dim=-1))
                    self.slot(spec["tag"]).setdefault("stats", []).append((ent, lse))

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


def _inner(model):
    return getattr(model, "model", model)


def _decoder_layers(model):
    layers = getattr(_inner(model), "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no .model.layers: not a decoder-only LM "
                         "this backend knows")
    return layers


def _capture(worker) -> _Capture:
    cap = getattr(worker, "_seakr_capture", None)
    if cap is None:
        cap = worker._seakr_capture = _Capture(worker)
    return cap


# ---------------------------------------------------------------------- RPC entry points
def install(worker, what: list) -> bool:
    """Install the hooks `what` lists: ("vec", layer, hook) | ("stats",) | ("hidden",)."""
    cap = _capture(worker)
    for item in what:
        if item[0] == "vec":
            cap.ensure_vec(int(item[1]), str(item[2]))
        elif item[0] == "stats":
            cap.ensure_stats()
        elif item[0] == "hidden":
            cap.ensure_hidden()
        else:
            raise ValueError(f"unknown capture {item!r}")
    return True


@torch.inference_mode()
def fetch(worker, tags: list[str], score: dict | None = None) -> dict[str, dict]:
    """Pop what was captured for `tags` (as numpy / floats).

    `score` maps a tag to (n_prompt, continuation ids): its captured final hidden states become
    the log-probabilities, entropies and logsumexps of the continuation tokens.
    """
    cap = _capture(worker)
    out: dict[str, dict] = {}
    for tag in tags:
        got = cap.store.pop(tag, {})
        item: dict[str, Any] = {}
        if "vec" in got:
            item["vec"] = got["vec"].numpy()
        if "stats" in got:
            item["stats"] = got["stats"]
        if "hidden" in got and score and tag in score:
            n_prompt, cont = score[tag]
            h = torch.cat(got["hidden"])[n_prompt - 1: n_prompt - 1 + len(cont)]
            logits = cap.model.compute_logits(h)
            if logits is not None:
                logits = logits.float()
                logp = torch.log_softmax(logits, dim=-1)
                tgt = torch.tensor(cont, device=logits.device)
                item["logprobs"] = logp.gather(1, tgt[:, None])[:, 0].tolist()
                item["entropies"] = (-(logp.exp() * logp).nan_to_num().sum(-1)).tolist()
                item["logsumexp"] = torch.logsumexp(logits, dim=-1).tolist()
        out[tag] = item
    return out


def drop(worker, tags: list[str]) -> bool:
    """Forget captures of requests that failed or were aborted."""
    cap = _capture(worker)
    for tag in tags:
        cap.store.pop(tag, None)
    return True
