"""Token strings and texts decoded in context, with a LLaMA-style (sentencepiece) tokenizer.

GPT-2-style byte-level tokens carry their spaces, so decoding a token alone looks right; LLaMA's
decoder strips the leading space of whatever it decodes, and byte-fallback tokens only form a
character together. These tests build such a tokenizer locally (tests/llama_tok.py) and drive the
real transformers backend on a tiny random LLaMA whose greedy output is scripted.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import llama_tok  # noqa: E402
from fakes import FakeSearcher, hit  # noqa: E402
from llama_tok import BOS, EOS, scripted  # noqa: E402
from seakr_repro.llm.sampling_settings import Sampling

PROMPT = "Question: Who directed Maddalena?\nAnswer: The film came out in 1959."


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    import torch
    torch.set_num_threads(1)
    return llama_tok.build_backend(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def tok(backend):
    return backend.tokenizer


def ids_of(tok, text):
    """The ids of `text` as the model would emit them after a prompt (a leading "▁" first)."""
    return tok(text, add_special_tokens=False)["input_ids"]


def test_the_tokenizer_is_llama_like(tok):
    ids = tok("Ivania went to Zürich")["input_ids"]
    assert ids[0] == BOS and ids.count(BOS) == 1 and tok.eos_token_id == EOS
    assert tok.convert_ids_to_tokens(ids)[1].startswith("\u2581")        # "▁Iv..."
    assert "<0xC3>" in tok.convert_ids_to_tokens(ids)                     # ü by byte fallback
    assert tok.decode(ids_of(tok, " went")) == "went"                    # alone: space lost


def test_pieces_keep_spaces_and_join_byte_fallback_characters(tok):
    from seakr_repro.llm.tokenizing import decode_pieces
    decode = lambda ids: tok.decode(ids, skip_special_tokens=False)    # noqa: E731
    p_ids = tok(PROMPT)["input_ids"]
    cont = ids_of(tok, "Ivania went to Café Zürich.")
    pieces = decode_pieces(decode, cont, p_ids)
    assert "".join(pieces) == " Ivania went to Café Zürich."            # as vLLM returns it
    assert PROMPT + "".join(pieces) == tok.decode(p_ids[1:] + cont)      # the round trip
    names = tok.convert_ids_to_tokens(cont)
    at = names.index("<0xC3>")
    assert pieces[at] == "" and pieces[at + 1] in ("é", "ü")             # one character, once
    assert decode_pieces(decode, cont)[0] == "I"                         # no context: no space


def test_generate_text_and_tokens_keep_the_leading_space_and_stop_at_period(backend, tok):
    cont = ids_of(tok, "Paris is big. So the answer is Paris.")
    with scripted(backend, [(cont, None)]):
        gen = backend.generate(PROMPT, max_new_tokens=30, stop=["\n\n", ". "])
    assert gen.text == " Paris is big" and gen.finish_reason == "stop"
    assert gen.text.startswith("".join(gen.tokens)) and gen.tokens[0] == " P"   # "▁P": no "▁Paris"
    assert len(gen.tokens) == len(gen.token_ids) == len(gen.logprobs)
    assert gen.token_ids == cont[:len(gen.token_ids)]


def test_the_space_after_answer_is_a_prompt_token_and_the_text_round_trips(backend, tok):
    prompt = "Question: Who directed Maddalena?\nAnswer: "
    ids = backend._encode(prompt)
    assert ids[0] == BOS and tok.convert_ids_to_tokens(ids)[-1] == "\u2581"
    cont = ids_of(tok, "Augusto Genina")            # "▁Augusto": a second space, as vLLM reads it
    with scripted(backend, [(cont, None)]):
        gen = backend.generate(prompt, max_new_tokens=20, stop=["\n"])
    assert gen.text == " Augusto Genina" and gen.finish_reason == "eos"
    assert prompt + gen.text == tok.decode(ids[1:] + gen.token_ids)


def test_bos_and_eos(backend, tok):
    assert backend.eos_token_id == EOS
    ids = backend._encode("Question: x")
    assert ids[0] == BOS and BOS not in ids[1:] and backend.count_tokens("Question: x") == len(ids)
    assert BOS not in backend._encode_continuation("Paris")
    cont = ids_of(tok, "Rome")
    with scripted(backend, [(cont, None)]):
        gen = backend.generate("Question: x\nAnswer:", max_new_tokens=10)
        s = backend.sample("Question: x\nAnswer:", Sampling(k=2, max_new_tokens=10, temperature=0.0))
    assert gen.finish_reason == "eos" and EOS not in gen.token_ids and gen.text == " Rome"
    assert [g.text for g in s.samples] == [" Rome", " Rome"] and s.vectors.shape == (2, 32)


def test_score_tokens_are_decoded_in_context(backend, tok):
    g = backend.score(PROMPT, " Ivania went")
    assert "".join(g.tokens).strip() == "Ivania went" and g.tokens[-1] == " went"


def test_flare_query_keeps_the_spaces_between_words(backend, tok):
    from seakr_repro.methods import build_method
    head = ids_of(tok, "The director of Maddalena is")
    cont = ids_of(tok, "The director of Maddalena is Ivania Vasquez")
    assert cont[:len(head)] == head
    probs = [0.99] * len(head) + [0.2] * (len(cont) - len(head))
    searcher = FakeSearcher([hit("1", "Maddalena is a 1954 film directed by Augusto Genina.")])
    method = build_method("flare", backend, searcher, "bundled-2wiki", n_shot=1, max_steps=1,
                          max_new_tokens=40)
    with scripted(backend, [(cont, probs)]):
        method.run(SimpleNamespace(id="q", question="Who directed Maddalena?", golds=["x"]))
    assert searcher.queries[0] == "The director of Maddalena is"


def _zurich(backend, tok, byte_p=0.3):
    """A generation whose word Zürich has its ü from two byte tokens of probability byte_p."""
    cont = ids_of(tok, "The film was shot in Zürich")
    names = tok.convert_ids_to_tokens(cont)
    probs = [byte_p if n.startswith("<0xC") or n == "<0xBC>" else 0.99 for n in names]
    with scripted(backend, [(cont, probs)]):
        return backend.generate(PROMPT, max_new_tokens=20, want_stats=True), names


def test_dragin_words_cover_their_byte_fallback_tokens(backend, tok):
    from seakr_repro.methods.text import align_words
    gen, names = _zurich(backend, tok)
    words = {w.text: idx for sent in align_words(gen.text, gen.tokens) for w, idx in sent}
    assert list(words) == ["The", "film", "was", "shot", "in", "Zürich"]
    covered = [names[i] for i in words["Zürich"]]
    assert "<0xC3>" in covered and "<0xBC>" in covered and covered[-1] == names[-1]
    # DRAGIN's own token-to-word merge: one word spanning the byte pieces, read as text
    spans = backend.words(gen.token_ids)
    assert [w for _, _, w in spans] == ["The", "film", "was", "shot", "in", "Zürich"]
    a, b, _ = spans[-1]
    assert set(words["Zürich"]) <= set(range(a, b + 1)) and b == words["Zürich"][-1]


def test_seakr_query_alignment_sees_the_byte_tokens(backend, tok):
    from seakr_repro.methods.seakr.query import formulate_query
    gen, _ = _zurich(backend, tok, byte_p=0.3)
    q, info = formulate_query(gen.text, gen.tokens, gen.logprobs, "Where was the film shot?", None)
    kept = {r["word"]: r for sent in info["words"] for r in sent}
    assert kept["Zürich"]["max_1mp"] == pytest.approx(0.7, abs=1e-3) and not kept["Zürich"]["kept"]
    assert "Zürich" not in q and "film" in q
    sure, _ = _zurich(backend, tok, byte_p=0.99)
    q2, _ = formulate_query(sure.text, sure.tokens, sure.logprobs, "Where was the film shot?", None)
    assert "Zürich" in q2


def test_official_query_builder_counts_only_ascii_letters_and_digits(backend, tok):
    """SEAKR/reasoner.py (_restruct_tokens, remove_special_characters) strips every character but
    [a-zA-Z0-9] from each token and word and drops what is left empty: the byte tokens of "ü" do
    not count, so Zürich is judged on Z... and ...rich alone and enters the official query."""
    from seakr_repro.methods.seakr.query import formulate_query
    gen, names = _zurich(backend, tok, byte_p=0.3)
    q, info = formulate_query(gen.text, gen.tokens, gen.logprobs, "Where was the film shot?", None,
                              mode="faithful")
    kept = {r["word"]: r for sent in info["words"] for r in sent}
    assert kept["Zürich"]["max_1mp"] == pytest.approx(0.01, abs=1e-3) and kept["Zürich"]["kept"]
    assert q == "film shot Zürich"
    fixed, _ = formulate_query(gen.text, gen.tokens, gen.logprobs, "Where was the film shot?", None,
                               mode="fixed")
    assert "Zürich" not in fixed          # every letter counts: the unsure "ü" drops the word


def test_official_query_reads_the_token_the_stop_string_splits(backend, tok):
    """The official query builder reads the engine's token list, which runs to the token that
    completed the stop string: "Lee. She" is "▁L" "e" "e." "▁S" here, the text is cut at ". ",
    and "e." still lends "Lee" its probability (SEAKR/reasoner.py, _restruct_tokens); "▁S", the
    token that completed ". ", was overwritten by EOS and counts for nothing."""
    from seakr_repro.methods.seakr.query import engine_view, formulate_query
    cont = ids_of(tok, "The film was directed by Ann Lee. She")
    names = tok.convert_ids_to_tokens(cont)
    assert names[-5:-1] == ["\u2581L", "e", "e.", "\u2581S"]
    probs = [0.99] * len(cont)
    probs[names.index("e.")] = 0.3
    with scripted(backend, [(cont, probs)]):
        gen = backend.generate(PROMPT, max_new_tokens=30, stop=[". "])
    assert gen.text == " The film was directed by Ann Lee" and gen.tokens[-1] == "e"
    question = "Who made the film?"
    toks, lps = engine_view(gen, "replace_last", "faithful")
    assert toks[-1] == "e" and len(toks) == len(gen.tokens) + 1
    q, _ = formulate_query(gen.text, toks, lps, question, None, mode="faithful")
    assert q == "film directed Ann"                   # Lee: 1 - 0.3 from "e."
    toks, lps = engine_view(gen, "append", "fixed")   # fixed: the returned text's tokens
    q, _ = formulate_query(gen.text, toks, lps, question, None, mode="fixed")
    assert q == "film directed Ann Lee"


def test_vllm_generation_decodes_like_the_transformers_backend(backend, tok):
    """The vLLM backend's output handling (no engine needed): same ids, same text and tokens."""
    from seakr_repro.llm.vllm.backend import VLLMBackend
    vb = VLLMBackend.__new__(VLLMBackend)
    vb.tokenizer, vb.eos_token_id = tok, EOS
    p_ids = backend._encode(PROMPT)
    cont = ids_of(tok, "Ivania went to Zürich. So")
    out = SimpleNamespace(token_ids=cont, logprobs=[{t: SimpleNamespace(logprob=math.log(0.5))}
                                                     for t in cont],
                          finish_reason="stop", stop_reason=". ")
    g = vb._generation(out, {}, [". "], p_ids, False)
    with scripted(backend, [(cont, [0.5] * len(cont))]):
        h = backend.generate(PROMPT, max_new_tokens=30, stop=[". "])
    assert g.text == h.text == " Ivania went to Zürich"
    assert g.tokens == h.tokens and g.token_ids == h.token_ids and g.n_prompt_tokens == len(p_ids)


def test_a_stop_string_that_starts_with_the_leading_space_is_cut(backend, tok):
    cont = ids_of(tok, "Ivania went home")            # " Ivania ..." only in context
    with scripted(backend, [(cont, None)]):
        gen = backend.generate(PROMPT, max_new_tokens=20, stop=[" Ivania"])
    assert gen.text == "" and gen.token_ids == [] and gen.finish_reason == "stop"
