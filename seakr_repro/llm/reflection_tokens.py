"""Self-RAG's reflection tokens: the checkpoint's vocabulary must hold each as ONE token, which the
model registry checks before loading the weights and the method reads by id."""
from __future__ import annotations

from ..core.errors import UserError

RETRIEVE, NO_RETRIEVE = "[Retrieval]", "[No Retrieval]"
REL = ("[Relevant]", "[Irrelevant]")
SUP = ("[Fully supported]", "[Partially supported]", "[No support / Contradictory]")
USE = tuple(f"[Utility:{i}]" for i in range(1, 6))

CONTINUE = "[Continue to Use Evidence]"

SCORED_TOKENS = (RETRIEVE, NO_RETRIEVE, *REL, *SUP, *USE)   # read one token each by the method
# The checkpoint's special tokens (its tokenizer's additional_special_tokens, BOS, EOS, UNK, PAD):
# vLLM's detokenizer leaves them out of the text by default, so run_short_form.py's answers never
# hold them.
SKIPPED_IN_TEXT = (NO_RETRIEVE, RETRIEVE, CONTINUE, *REL[::-1], "<paragraph>", "</paragraph>", *USE,
                   *SUP, "<s>", "</s>", "<unk>", "<pad>")


def check_reflection_tokens(tokenizer, path, setting: str = "model.paths.selfrag-llama2-7b") -> None:
    """Refuse a checkpoint whose vocabulary lacks Self-RAG's reflection tokens: the method reads
    each as ONE token, and an ordinary LLaMA would score their word pieces instead."""
    unk = getattr(tokenizer, "unk_token_id", None)
    missing = []
    for tok in SCORED_TOKENS:
        ids = tokenizer(tok, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or ids[0] == unk:
            missing.append(tok)
    if missing:
        raise UserError(
            f"the model in {path} is not a Self-RAG checkpoint: its tokenizer lacks the reflection "
            f"token(s) {', '.join(missing)}", path=path, setting=setting,
            fix="point the setting at a download of selfrag/selfrag_llama2_7b (`huggingface-cli "
                "download selfrag/selfrag_llama2_7b --local-dir DIR`), not at another LLaMA")
