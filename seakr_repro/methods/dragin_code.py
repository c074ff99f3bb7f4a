"""What the baselines share when they run as DRAGIN's code runs them (`baselines.mode: faithful`).

SeaKR's Table 1 takes its CoT, IR-CoT, FLARE and DRAGIN rows from DRAGIN's runs, so `faithful`
reproduces DRAGIN's `src/generate.py` + `src/eval.py` for LLaMA-2-7b-chat: its prompt layout and
demos, generation in chunks of `max_new_tokens` without stop strings until the text holds "the
answer is" or stops growing, its text and token strings as its `tokenizer.decode` gives them, its
decoding and dtype, its 64-token queries and its answer extraction. docs/faithful-and-fixed.md
has one row per behaviour ("Baselines' ..."), with DRAGIN's file for each.
Not reproduced: the EOS token DRAGIN's decode keeps at the end of a continuation ("</s>")."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ..core.errors import UserError
from ..evaluation.extraction import (
    DRAGIN_REASK,
    DRAGIN_REASK_TOKENS,
    dragin_answer,
    dragin_needs_reask,
    dragin_reasked,
    dragin_trim,
)
from ..llm.base import Generation
from ..llm.sampling_settings import Sampling
from ..prompts.dragin import DraginPrompt, dragin_prompt
from ..prompts.examples import Demo
from .base import step_record
from .text import nlp

INSTRUCTION_LINE = "Answer in the same format as before.\n"
QUERY_MAX_TOKENS = 64     # DRAGIN's retriever keeps the last 64 tokens of a query


# A generation_config.json key that changes what `model.generate` does, and its neutral value:
# a checkpoint that sets one otherwise cannot be decoded as DRAGIN's code would decode it here.
UNSUPPORTED_DECODING = {"num_beams": 1, "num_beam_groups": 1, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
                        "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "penalty_alpha": None,
                        "diversity_penalty": 0.0, "encoder_repetition_penalty": 1.0, "bad_words_ids": None,
                        "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None,
                        "forced_eos_token_id": None, "min_new_tokens": None, "min_length": 0, "sequence_bias": None,
                        "exponential_decay_length_penalty": None, "renormalize_logits": False}
GREEDY = {"do_sample": False}


def demo_case(d: Demo) -> str:
    """A package demo in DRAGIN's format (DRAGIN's `case` of a demo)."""
    return f"Question: {d.question}\nAnswer: {' '.join(d.steps)} So the answer is {d.answer}."


def prompt_parts(method) -> tuple[str, DraginPrompt]:
    """(the demos block, the question template) of a faithful baseline: DRAGIN's own from the
    clone at `dragin_repo` when `demos` is 'official', else the package's demos (`paper`)."""
    s = method.settings
    if s.get("demos") == "official":
        prompt = dragin_prompt(s.get("dragin_repo"), method.family)
        return prompt.block(s["n_shot"]), prompt
    prompt = DraginPrompt(tuple(demo_case(d) for d in method.demos), ("Question: ", "\nAnswer:"))
    return prompt.block(len(prompt.demos)), prompt


def checkpoint_decoding(backend, setting: str | None) -> dict[str, Any]:
    """How DRAGIN's `model.generate` (no do_sample) decodes this checkpoint: its generation_config.json
    over transformers' defaults; `setting` 'greedy' overrides it."""
    if setting == "greedy":
        return dict(GREEDY)
    if setting not in (None, "checkpoint"):
        raise UserError(f"unknown baselines.decoding '{setting}'", setting="baselines.decoding",
                        fix="use null/checkpoint (the checkpoint's generation config, as DRAGIN's code) or greedy")
    cfg = getattr(backend, "generation_config", None)
    if cfg is None:
        raise UserError(f"the faithful baselines decode as {getattr(backend, 'name', 'the model')}'s "
                        "generation_config.json says, which this backend does not read",
                        setting="baselines.decoding",
                        fix="use the transformers backend (model.backend: hf), or set baselines.decoding: greedy")
    for key, neutral in UNSUPPORTED_DECODING.items():
        if cfg.get(key, neutral) not in (neutral, None):
            raise UserError(f"the checkpoint's generation_config.json sets {key}={cfg[key]!r}, which "
                            "the faithful baselines cannot decode as transformers would",
                            setting="baselines.decoding",
                            fix="set baselines.decoding: greedy (a departure from DRAGIN's runs)")
    if not cfg.get("do_sample", False):
        return dict(GREEDY)
    return {"do_sample": True, "temperature": float(cfg.get("temperature", 1.0)),
            "top_k": int(cfg.get("top_k", 50) or 0), "top_p": float(cfg.get("top_p", 1.0))}


def _need(backend, name: str):
    fn = getattr(backend, name, None)
    if fn is None:
        raise UserError(f"the faithful baselines need the backend's tokenizer ({name})",
                        setting="model.backend", fix="use the transformers or vLLM backend")
    return fn


def as_dragin(backend, gen: Generation) -> Generation:
    """`gen` as DRAGIN's code reads it: text = `tokenizer.decode(ids)` (the leading space of the
    continuation gone), each token's string decoded alone (`tokenizer.decode(id)`)."""
    decode = _need(backend, "decode")
    return replace(gen, text=decode(gen.token_ids), tokens=[decode([t]) for t in gen.token_ids])


def generate(method, prompt: str, max_new_tokens: int, *, stats: bool = False,
             attention: bool = False) -> Generation:
    """One `model.generate` call of DRAGIN's code, read as it reads it. Sampled when the checkpoint
    says so, seeded with its order among the question's sampled calls (DRAGIN's unseeded generator
    cannot be replayed), with the log-probs of the distribution sampled from, as DRAGIN's."""
    backend, dec = method.backend, method.decoding
    if not dec["do_sample"]:
        gen = backend.generate(prompt, max_new_tokens=max_new_tokens, stop=[], want_stats=stats,
                               want_attention=attention)
        return as_dragin(backend, gen)
    if attention:
        raise UserError("the checkpoint's generation_config.json samples, and DRAGIN's attention and "
                        "entropies of a sampled continuation are not computed by the backends",
                        setting="baselines.decoding",
                        fix="set baselines.decoding: greedy for DRAGIN (a departure from its runs)")
    method.q.n_sampled = seed = getattr(method.q, "n_sampled", -1) + 1
    s = backend.sample(prompt, Sampling(k=1, max_new_tokens=max_new_tokens, seed=seed, temperature=dec["temperature"],
                                        top_k=dec["top_k"], top_p=dec["top_p"])).samples[0]
    n = len(s.token_ids)
    return as_dragin(backend, replace(s, logprobs=list((s.warped_logprobs or s.logprobs)[:n])))


def truncate_query(backend, query: str, max_tokens: int | None = None) -> str:
    """DRAGIN's retriever: the query tokenized without special tokens, its last `max_tokens`
    tokens kept (a word may be cut) and decoded again without special tokens."""
    ids = _need(backend, "encode_plain")(query)
    return _need(backend, "decode")(ids[-(max_tokens or QUERY_MAX_TOKENS):], skip_special_tokens=True)


def context(docs: Sequence[str], instruction: str = INSTRUCTION_LINE) -> str:
    return "Context:\n" + "".join(f"[{i + 1}] {d}\n" for i, d in enumerate(docs)) + instruction


def sentences_of(text: str) -> list[str]:
    """spaCy's sentences of `text`, stripped, empty ones dropped (as DRAGIN splits)."""
    return [s for s in (sent.text.strip() for sent in nlp()(text).sents) if s]


def first_sentence(text: str) -> str:
    sents = sentences_of(text)
    return sents[0] if sents else ""


def finished(backend, text: str, max_new_tokens: int, old_len: int) -> bool:
    """DRAGIN's end of the generation loop."""
    return backend.count_tokens(text) > max_new_tokens or len(text) <= old_len or "the answer is" in text


def finish(method, question: str, text: str, trace: list) -> tuple[str, str]:
    """(answer, scored prediction) of a generated text, as DRAGIN's evaluation scores it."""
    trimmed = dragin_trim(text.strip())
    final = trimmed
    if dragin_needs_reask(trimmed):
        head, template = method.dragin_prompt
        prompt = head + template.case(question) + " " + trimmed + DRAGIN_REASK
        forced = generate(method, prompt, DRAGIN_REASK_TOKENS)
        trace.append(step_record("forced_answer", prompt, forced.text))
        final = dragin_reasked(trimmed, forced.text)
    return dragin_answer(final, method.family), final
