"""Self-RAG (Asai et al.) short-form inference with reflection tokens, as the authors'
`retrieval_lm/run_short_form.py` runs it (`call_model_rerank_w_scores_batch`).

Needs the Self-RAG checkpoint (selfrag/selfrag_llama2_7b) for its reflection tokens. One question:
1. Retrieve or not (`retrieval`: adaptive | always | never); adaptive compares the log-probs of
   [Retrieval] and [No Retrieval] at the first token with `threshold` (faithful: their LOG-prob
   ratio, as the code; fixed: the probability ratio, as the paper).
2. Without passages: the greedy continuation of prompt + "[No Retrieval]" is the answer.
3. With passages (the top `ndocs` of a search, or with `passages: input` the question's `ctxs` in
   `input_files[<data set>]`): one greedy continuation per passage, scored
   exp(seq) + w_rel ISREL + w_sup ISSUP + w_use ISUSE (seq: mean log-prob with EOS; ISREL at the
   first token; ISSUP = P(Fully) + 0.5 P(Partially), ISUSE = sum_i w_i P([Utility:i]) with
   w = (-1, -0.5, 0, 0.5, 1), each where the continuation first generates one, else 0; each term
   switched by `use_seqscore`, `use_groundness`, `use_utility`); the highest wins (the first on a
   tie). docs/faithful-and-fixed.md ("Self-RAG in both modes") has every detail.
"""
from __future__ import annotations

import math

from ..core.errors import DataMissingError, UserError
from ..llm.base import generate_many
from ..llm.reflection_tokens import NO_RETRIEVE, REL, RETRIEVE, SKIPPED_IN_TEXT, SUP, USE
from .base import Method, MethodResult, hits_brief, step_record

USE_WEIGHTS = (-1.0, -0.5, 0.0, 0.5, 1.0)
MODES = ("faithful", "fixed")
PASSAGES = ("index", "input")   # a search of the package's index | the input file's ctxs (the code's)
RETRIEVAL = ("adaptive", "always", "never")   # the code's --mode adaptive_retrieval | always_retrieve | no_retrieval
_S = "self_rag."
# the strings the code's postprocess removes (`control_tokens`: no [Continue to Use Evidence])
ANSWER_STRIPPED = (*SUP, NO_RETRIEVE, RETRIEVE, *REL[::-1], "<paragraph>", "</paragraph>", *USE)


def is_self_rag_model(name: str) -> bool:
    return "selfrag" in "".join(c for c in (name or "").lower() if c.isalpha())


def retrieve_score(lp_retrieve: float, lp_no_retrieve: float, mode: str) -> float:
    """What `threshold` is compared with. faithful: lp_R / (lp_R + lp_N), as the code divides vLLM's
    log-probs: it falls as P([Retrieval]) rises (0.9 vs 0.1 gives 0.04). fixed: P_R / (P_R + P_N)."""
    if mode == "faithful":
        return lp_retrieve / (lp_retrieve + lp_no_retrieve)
    p_r, p_n = math.exp(lp_retrieve), math.exp(lp_no_retrieve)
    return p_r / (p_r + p_n)


def answer_text(text: str, retrieved: bool, mode: str) -> str:
    """The answer of a continuation's text (special tokens skipped). faithful, as run_short_form.py:
    after passages the text as is; without, "\\n" (words run together), the reflection-token strings,
    "</s>" and "<|endoftext|>" deleted. fixed: those removed on both paths, whitespace squeezed.
    Then one leading "#" or ":" dropped."""
    if mode == "faithful":
        if not retrieved:
            for s in (*ANSWER_STRIPPED, "</s>", "\n", "<|endoftext|>"):
                text = text.replace(s, "")
    else:
        for s in (*SKIPPED_IN_TEXT, "<|endoftext|>"):
            text = text.replace(s, "")
        text = " ".join(text.split())
    return text[1:] if text[:1] in ("#", ":") else text


class SelfRAG(Method):
    name = "self_rag"
    DEFAULTS = {"mode": "fixed", "retrieval": "adaptive", "threshold": 0.2, "ndocs": 3,
                "max_new_tokens": 100, "w_rel": 1.0, "w_sup": 1.0, "w_use": 1.0,
                "use_seqscore": True, "use_groundness": True, "use_utility": True,
                "passages": "index", "input_files": {}}
    CONFIG = {k: _S + k for k in DEFAULTS}

    def __init__(self, backend, searcher, dataset_name, settings=None):
        if not is_self_rag_model(getattr(backend, "name", "")):
            raise DataMissingError(
                f"Self-RAG needs its own checkpoint, but the backend runs '{getattr(backend, 'name', '?')}'",
                setting="model.paths.selfrag-llama2-7b",
                fix="download selfrag/selfrag_llama2_7b, point model.paths.selfrag-llama2-7b at "
                    "it and select the Self-RAG model for this method")
        super().__init__(backend, searcher, dataset_name, settings)
        s = self.settings
        for key, allowed in (("mode", MODES), ("retrieval", RETRIEVAL), ("passages", PASSAGES)):
            if s[key] not in allowed:
                raise UserError(f"unknown self_rag.{key} '{s[key]}'", setting=_S + key,
                                fix=f"use one of {', '.join(allowed)}")
        self._input = None
        if s["passages"] == "input":      # the input file is read now: a bad one fails before a run
            from ..retrieval.passages import InputPassages
            setting = f"{_S}input_files.{dataset_name}"
            path = (s["input_files"] or {}).get(dataset_name)
            if not path:
                raise UserError(f"self_rag.passages is input, but no input file is named for {dataset_name}",
                                setting=setting,
                                fix=f"set {setting} to a file of run_short_form.py's input format "
                                    "(questions with their ctxs), or set self_rag.passages: index")
            self._input = InputPassages(path, setting)
        if not hasattr(backend, "read_logprobs"):
            raise UserError(f"the backend of {backend.name} cannot read token log-probs at given "
                            "positions (read_logprobs), which Self-RAG's critique needs",
                            setting="model.backend", fix="use the hf or vllm backend")
        self._ids: dict[str, int] | None = None

    @property
    def config(self) -> dict:
        cfg = super().config
        files = cfg.pop("input_files")
        if cfg["passages"] == "index":
            del cfg["passages"]     # the default adds nothing to the key: runs from the index keep theirs
        else:                       # only this data set's file changes this run's output
            cfg["input_file"] = str(files[self.dataset_name])
        return cfg

    def _passages(self, question: str, k: int) -> list:
        return self._input.search(question, k) if self._input is not None else self.search(question, k)

    # -- token ids ------------------------------------------------------------------------------
    @property
    def ids(self) -> dict[str, int]:
        """Reflection token -> id (each one token), and the skipped special tokens that are one token."""
        if self._ids is None:
            ids = {}
            for tok in (RETRIEVE, NO_RETRIEVE, *REL, *SUP, *USE, *SKIPPED_IN_TEXT):
                got = self.backend.encode_plain(tok)
                if len(got) == 1:
                    ids[tok] = got[0]
                elif tok in (RETRIEVE, NO_RETRIEVE, *REL, *SUP, *USE):
                    raise UserError(f"{self.backend.name}'s tokenizer splits the reflection token "
                                    f"{tok}", setting="model.paths.selfrag-llama2-7b",
                                    fix="use the Self-RAG checkpoint's own tokenizer")
            self._ids = ids
        return self._ids

    def _text(self, gen) -> str:
        """The continuation's text as vLLM returns it by default: special tokens skipped."""
        skip = {self.ids[t] for t in SKIPPED_IN_TEXT if t in self.ids}
        return "".join(p for t, p in zip(gen.token_ids, gen.tokens) if t not in skip)

    @staticmethod
    def prompt(question: str) -> str:
        return f"### Instruction:\n{question}\n\n### Response:\n"

    # -- scoring one passage's continuation ------------------------------------------------------
    def _critique(self, prefix: str, gen) -> dict:
        s, ids = self.settings, self.ids
        seq_ids = list(gen.token_ids)
        eos = gen.finish_reason == "eos"
        groups = {"rel": (REL, 0)}

        def first(tokens):   # position of the first generated token of the group
            wanted = {ids[t] for t in tokens}
            return next((i for i, t in enumerate(seq_ids) if t in wanted), None)
        if s["use_groundness"] and (i := first(SUP)) is not None:
            groups["sup"] = (SUP, i)
        if s["use_utility"] and (i := first(USE)) is not None:
            groups["use"] = (USE, i)
        reads = [(pos, ids[t]) for toks, pos in groups.values() for t in toks]
        if eos:
            reads.append((len(seq_ids), self.backend.eos_token_id))
        lps = self.backend.read_logprobs(prefix, seq_ids, reads).logprobs
        probs, k = {}, 0
        for name, (toks, _pos) in groups.items():
            probs[name] = [math.exp(lp) for lp in lps[k:k + len(toks)]]
            k += len(toks)
        all_lps = list(gen.logprobs) + ([lps[-1]] if eos else [])
        seq = sum(all_lps) / max(len(all_lps), 1)
        rel = probs["rel"][0] / sum(probs["rel"])
        sup = use = 0.0
        if "sup" in probs:
            p = probs["sup"]
            sup = p[0] / sum(p) + 0.5 * (p[1] / sum(p))
        if "use" in probs:
            p = probs["use"]
            use = sum(w * (q / sum(p)) for w, q in zip(USE_WEIGHTS, p))
        score = s["w_rel"] * rel + s["w_sup"] * sup + s["w_use"] * use
        if s["use_seqscore"]:
            score = math.exp(seq) + score
        return {"seq": seq, "isrel": rel, "issup": sup, "isuse": use, "score": score,
                "sup_at": groups.get("sup", (None, None))[1],
                "use_at": groups.get("use", (None, None))[1]}

    # -- one question ------------------------------------------------------------------------------
    def _without_passages(self, base: str, trace: list, n_retrievals: int, **extra) -> MethodResult:
        gen = self.backend.generate(base + NO_RETRIEVE, max_new_tokens=self.settings["max_new_tokens"])
        text = self._text(gen)
        trace.append(step_record("no_retrieval", base, text))
        return MethodResult(answer=answer_text(text, False, self.settings["mode"]), raw_output=text,
                            trace=trace, n_retrievals=n_retrievals, extra=extra)

    def answer(self, record) -> MethodResult:
        s, base = self.settings, self.prompt(record.question)
        extra: dict = {}
        if s["retrieval"] == "adaptive":
            lp_r, lp_n = self.backend.read_logprobs(
                base, [], [(0, self.ids[RETRIEVE]), (0, self.ids[NO_RETRIEVE])]).logprobs
            value = retrieve_score(lp_r, lp_n, s["mode"])
            retrieve = value > s["threshold"]
            extra = {"p_retrieval": math.exp(lp_r) / (math.exp(lp_r) + math.exp(lp_n)),
                     "retrieve_score": value}
        else:
            retrieve = s["retrieval"] == "always"
        trace = [step_record("retrieve_decision", base, "", threshold=s["threshold"],
                             retrieve=retrieve, **extra)]
        if not retrieve:
            return self._without_passages(base, trace, 0, **extra)
        hits = self._passages(record.question, s["ndocs"])
        if not hits:
            # no passage to critique: the official code fails here; its answer whenever it does not
            # retrieve is the continuation after [No Retrieval]; the search counts as a retrieval
            trace.append(step_record("no_hits", record.question, "", hits=[]))
            return self._without_passages(base, trace, 1, no_hits=True, **extra)
        prefixes = [f"{base}{RETRIEVE}<paragraph>{h.title}\n{h.text}</paragraph>" for h in hits]
        gens = generate_many(self.backend, prefixes, max_new_tokens=s["max_new_tokens"])
        cands = [{"id": h.id, "text": self._text(gen), **self._critique(prefix, gen)}
                 for h, prefix, gen in zip(hits, prefixes, gens)]
        best = max(cands, key=lambda c: c["score"])   # the first of equal scores wins, as the code's stable sort
        trace.append(step_record("candidates", base, best["text"], hits=hits_brief(hits),
                                 candidates=cands, chosen=best["id"]))
        return MethodResult(answer=answer_text(best["text"], True, s["mode"]), raw_output=best["text"],
                            trace=trace, n_retrievals=1, extra={**extra, "chosen": best["id"]})
