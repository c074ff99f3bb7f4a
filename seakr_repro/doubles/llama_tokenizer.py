"""A LLaMA-style tokenizer built locally (nothing downloaded): the tests' and the card check's.

What makes LLaMA's detokenisation differ from GPT-2-style byte-level BPE: a sentencepiece BPE
with a Metaspace pre-tokenizer ("▁" marks a space, prepended to the first word), byte fallback
(<0x00>..<0xFF> at ids 3..258, as in LLaMA, for characters outside the vocabulary),
<unk>/<s>/</s> = 0/1/2, BOS added to every encoded text, and the decoder that strips the leading
space of whatever it decodes. Trained in well under a second on the package's own demonstrations
(ASCII only, so "é" or "ü" fall back to bytes).
"""
from __future__ import annotations

import json
from pathlib import Path

BOS, EOS = 1, 2


def build_tokenizer(out_dir: Path, vocab_size: int = 900):
    """Train, save to `out_dir` and load back with AutoTokenizer (as a backend would)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from ..prompts import DEMOS, format_demo

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
