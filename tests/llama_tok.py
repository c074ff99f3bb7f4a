"""A LLaMA-style tokenizer and a tiny LLaMA built locally (nothing downloaded), for tests.

The tokenizer is what makes LLaMA's detokenisation differ from GPT-2-style byte-level BPE: a
sentencepiece BPE with a Metaspace pre-tokenizer ("▁" marks a space, prepended to the first
word), byte fallback (<0x00>..<0xFF> at ids 3..258, as in LLaMA, for characters outside the
vocabulary), <unk>/<s>/</s> = 0/1/2, BOS added to every encoded text, and the decoder that strips
the leading space of whatever it decodes. Trained in well under a second on the package's own
demonstrations (ASCII only, so "é" or "ü" fall back to bytes).

`scripted(backend, calls)` makes greedy decoding follow given token lists with given
probabilities, so a test decides what the model "says" while every other step is the backend's.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

BOS, EOS = 1, 2


def build_tokenizer(out_dir: Path, vocab_size: int = 900):
    """Train, save to `out_dir` and load back with AutoTokenizer (as a backend would)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from seakr_repro.prompts import DEMOS, format_demo

    text = "\n\n".join(format_demo(d) for family in DEMOS.values() for d in family)
    text = "".join(c for c in text if ord(c) < 128)
    # pieces learned word by word, so they carry their space in front ("▁The"), as
    # sentencepiece's do; encoding then runs over the whole text (split=False), as LLaMA's does
    draft = Tokenizer(models.BPE(unk_token="<unk>"))
    draft.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always",
                                                   split=True)
    draft.train_from_iterator(text.split("\n\n"), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    trained = json.loads(draft.to_str())["model"]
    # LLaMA's layout: specials, then the 256 byte tokens, then the learned pieces
    vocab = {"<unk>": 0, "<s>": BOS, "</s>": EOS}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in sorted(trained["vocab"], key=trained["vocab"].get):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                 split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", BOS)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", add_bos_token=True, add_eos_token=False,
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)


def build_model(vocab_size: int, max_context: int = 2048, seed: int = 0):
    """A 2-layer LlamaForCausalLM with random weights (float32, CPU)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=max_context, bos_token_id=BOS, eos_token_id=EOS,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def build_backend(tmp_path: Path, max_context: int = 2048, name: str = "tiny-llama"):
    from seakr_repro.llm.hf.backend import HFBackend

    tok = build_tokenizer(tmp_path / "tok")
    return HFBackend(build_model(len(tok), max_context), tok, name, prefix_cache_tokens=0)


class scripted:
    """Context manager: the k-th prompt the backend encodes is answered (greedily) with
    calls[k] = (ids, probs), the last entry repeating: token i with probability probs[i] (the
    rest spread evenly), then EOS, whatever the random weights say."""

    def __init__(self, backend, calls: list[tuple[list[int], list[float] | None]]):
        self.backend, self.calls = backend, [(list(i), p) for i, p in calls]
        self.n_prompt, self.count = 0, 0

    def _encode(self, prompt):
        ids = type(self.backend)._encode(self.backend, prompt)
        self.n_prompt = len(ids)
        self.ids, probs = self.calls[min(self.count, len(self.calls) - 1)]
        self.probs = list(probs) if probs is not None else [0.99] * len(self.ids)
        self.count += 1
        return ids

    def _hook(self, module, args, kwargs, out):
        cache = out.past_key_values
        if kwargs.get("position_ids") is not None:     # shared-prefix decoding: rows cache only
            pos = int(kwargs["position_ids"][0, -1]) + 1   # their own tokens, positions say where
        else:
            pos = cache.get_seq_length() if cache is not None else kwargs["input_ids"].shape[1]
        step = pos - self.n_prompt              # index of the token this output predicts
        if step < 0 or not self.count:
            return out
        tok, p = (self.ids[step], self.probs[step]) if step < len(self.ids) else (EOS, 0.99)
        vocab = out.logits.shape[-1]
        logits = torch.full_like(out.logits, math.log((1 - p) / (vocab - 1)))
        logits[..., tok] = math.log(p)
        out.logits = logits
        return out

    def __enter__(self):
        self.backend._encode = self._encode
        self.handle = self.backend.model.register_forward_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        del self.backend._encode


def continuation_ids(tok, prompt: str, text: str) -> list[int]:
    """The ids of `text` as they follow `prompt` (the tokenizer's own split of prompt + text)."""
    whole = tok(prompt + text)["input_ids"]
    head = tok(prompt)["input_ids"]
    assert whole[:len(head)] == head, "the prompt's tokens change when the text follows"
    return whole[len(head):]
