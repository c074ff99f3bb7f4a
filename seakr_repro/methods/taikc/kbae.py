"""TAIKC's Knowledge Boundary Awareness Enhancement (KBAE, paper Section 4 and Appendix F).

Model bootstrapping on single-hop questions: the model answers each with Direct QA; the training
target under the Confident QA prompt is that answer when correct, else RAG_REQUIRED (model-specific
labels, the paper's point); LoRA-tuned with cross-entropy on the target tokens only.
`train_lora`'s defaults are the paper's (`PAPER_SETTINGS`, LLaMA-Factory on 3,096 examples of NQ,
PopQA and WebQuestions); its 9,589 instruction-following examples distilled from GPT-4o are not
reproduced. The synthetic backend (`cost`'s dry run, the scale check) has no weights to tune: no
adapter is trained, and a synthetic model of the adapter's name (or, replaying a real run's cache,
that run's adapted model: `llm.replay`) answers the Confident QA calls.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from ...core.disk_full import writing
from ...core.errors import DataMissingError, UserError
from ...evaluation import exact_match, normalize_answer
from .prompts import ANSWER_STOP, RAG_REQUIRED, clean_answer, confident_qa_prompt, direct_qa_prompt

# 16 examples per update: the paper's 2 x 8
PAPER_SETTINGS = {"r": 16, "alpha": 32, "lr": 5e-5, "epochs": 3, "batch_size": 16}
CRITERIA = ("acc", "em")
MANIFEST = "kbae_manifest.json"


@dataclass
class KBAEExample:
    id: str
    question: str
    direct_answer: str        # the model's Direct QA answer
    correct: bool
    prompt: str               # the Confident QA prompt
    target: str               # the direct answer, or RAG_REQUIRED

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrainResult:
    out_dir: Path
    losses: list[float] = field(default_factory=list)   # mean target-token loss of each update
    n_examples: int = 0
    steps: int = 0
    seconds: float = 0.0


def is_correct(answer: str, golds: Sequence[str], criterion: str = "acc") -> bool:
    """`acc`: a normalised gold occurs in the normalised answer (the string stand-in for the paper's
    LLM-judged semantic accuracy); `em`: exact match after normalisation."""
    if criterion not in CRITERIA:
        raise UserError(f"unknown KBAE correctness criterion '{criterion}'", setting="kbae.criterion",
                        fix=f"use one of {', '.join(CRITERIA)}")
    if criterion == "em":
        return exact_match(answer, list(golds)) == 1.0
    pred = f" {normalize_answer(answer)} "
    return any(g.strip() and f" {normalize_answer(g)} " in pred for g in golds)


def build_kbae_data(backend, single_hop_records, *, max_new_tokens: int = 32,
                    criterion: str = "acc") -> list[KBAEExample]:
    """One training example per record with gold answers (Direct QA once, greedy)."""
    out = []
    for rec in single_hop_records:
        golds = list(rec.golds)
        if not golds:
            continue
        prompt = direct_qa_prompt(rec.question)
        answer = clean_answer(backend.generate(prompt, max_new_tokens=max_new_tokens,
                                               stop=[ANSWER_STOP]).text)
        ok = bool(answer) and is_correct(answer, golds, criterion)
        out.append(KBAEExample(rec.id, rec.question, answer, ok, confident_qa_prompt(rec.question),
                               answer if ok else RAG_REQUIRED))
    return out


# ------------------------------------------------------------------------------------ training
def _encode(tokenizer, ex: KBAEExample, max_length: int) -> tuple[list[int], list[int]]:
    """Prompt ids exactly as the backend encodes a prompt (it ends with a line break), then the
    target + EOS: what greedy generation after the prompt should produce, and where it stops."""
    p = tokenizer(ex.prompt, add_special_tokens=True)["input_ids"]
    t = tokenizer(ex.target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    p = p[-max(1, max_length - len(t)):]          # keep the question end of an over-long prompt
    return p, t


def _shared_prefix(pairs) -> int:
    """Tokens every prompt starts with, one short of the shortest (each keeps its target's predictor)."""
    prompts = [p for p, _ in pairs]
    n = min(len(p) for p in prompts) - 1
    for i in range(max(0, n)):
        if any(p[i] != prompts[0][i] for p in prompts):
            return i
    return max(0, n)


def _loss(model, pairs, pad_id: int, n_prefix: int):
    """Mean cross-entropy over a batch's target tokens; the shared prompt prefix runs once, its KV
    cache (and autograd graph) repeated: the full sequences' loss and gradients, cheaper."""
    import torch
    tails = [(p[n_prefix:] + t, len(p) - n_prefix) for p, t in pairs]
    width = max(len(seq) for seq, _ in tails)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)   # right padding: causal
    mask = torch.zeros_like(ids)                                       # attention keeps it unseen
    labels = torch.full_like(ids, -100)
    for i, (seq, n_prompt) in enumerate(tails):
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
        labels[i, n_prompt - 1:len(seq) - 1] = torch.tensor(seq[n_prompt:])  # j predicts j + 1
    cache = None
    if n_prefix:
        cache = model(input_ids=torch.tensor([pairs[0][0][:n_prefix]]), use_cache=True).past_key_values
        cache.batch_repeat_interleave(len(pairs))
        mask = torch.cat([torch.ones(len(pairs), n_prefix, dtype=torch.long), mask], dim=1)
    pos = (n_prefix + torch.arange(width)).expand(len(pairs), -1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                   use_cache=cache is not None).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             labels.reshape(-1), ignore_index=-100)


@contextlib.contextmanager
def _quiet_peft():
    """peft reads transformers' deprecated `is_gradient_checkpointing` when it wraps a model (a
    FutureWarning in every notebook 10 run); nothing of ours to change, so that one is not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def train_lora(model, tokenizer, examples: Sequence[KBAEExample], out_dir, *, steps: int | None = None,
               epochs: float = PAPER_SETTINGS["epochs"], lr: float = PAPER_SETTINGS["lr"],
               r: int = PAPER_SETTINGS["r"], alpha: int = PAPER_SETTINGS["alpha"],
               batch_size: int = PAPER_SETTINGS["batch_size"], dropout: float = 0.05,
               target_modules="all-linear", max_length: int = 512, seed: int = 0,
               extra_manifest: dict | None = None) -> TrainResult:
    """LoRA on a transformers causal LM, AdamW: `steps` updates of `batch_size` examples (None:
    `epochs` seeded shuffled passes, rounded up). `out_dir` never holds half an adapter (written
    beside it, then renamed); `model` is left as it came (LoRA layers removed, not merged)."""
    import torch
    from peft import LoraConfig, get_peft_model

    if not examples:
        raise UserError("no KBAE training examples", setting="kbae",
                        fix="give single-hop questions with gold answers to build_kbae_data")
    t0 = time.perf_counter()
    encoded = [_encode(tokenizer, ex, max_length) for ex in examples]
    n_steps = steps if steps is not None else max(1, -(-int(round(epochs * len(encoded))) // batch_size))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    rng = random.Random(seed)
    was_training = model.training
    with _quiet_peft():
        peft_model = get_peft_model(model, LoraConfig(
            r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
            task_type="CAUSAL_LM"))
    try:
        opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=lr)
        peft_model.train()
        order: list[int] = []
        losses = []
        for _ in range(n_steps):
            if len(order) < batch_size:      # a new seeded pass when the current one runs out
                fresh = list(range(len(encoded)))
                rng.shuffle(fresh)
                order += fresh
            idx, order = order[:batch_size], order[batch_size:]
            batch = [encoded[i] for i in idx]
            loss = _loss(peft_model, batch, pad_id, _shared_prefix(batch))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        peft_model.eval()
        manifest = {"steps": n_steps, "epochs": epochs, "lr": lr, "r": r, "alpha": alpha,
                    "batch_size": batch_size, "dropout": dropout, "seed": seed,
                    "target_modules": str(target_modules), "max_length": max_length,
                    "n_examples": len(encoded),
                    "n_rag_required": sum(ex.target == RAG_REQUIRED for ex in examples),
                    "losses": losses, "data_sha": examples_sha(examples), **(extra_manifest or {})}
        out = _save_atomically(peft_model, Path(out_dir), manifest)
    finally:
        peft_model.unload()                   # base weights untouched: LoRA layers out, not merged
        model.train(was_training)
    return TrainResult(out, losses, len(encoded), n_steps, time.perf_counter() - t0)


def _save_atomically(peft_model, out: Path, manifest: dict) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    try:
        with writing(out):                    # a full disk: the one paragraph, the partial copy removed
            peft_model.save_pretrained(tmp)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if out.exists():                      # a directory cannot be renamed onto a full one
            os.replace(out, old)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return out


def examples_sha(examples: Sequence[KBAEExample]) -> str:
    blob = json.dumps([[ex.prompt, ex.target] for ex in examples], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _canonical_adapter_config(path: Path) -> bytes:
    """peft's adapter_config.json without what differs between identical adapters: the base model's
    absolute path and the order of its module sets (written from a set, in hash order)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config.pop("base_model_name_or_path", None)
    for key, value in config.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            config[key] = sorted(value)
    return json.dumps(config, sort_keys=True).encode()


def adapter_fingerprint(adapter_dir) -> str:
    """Hash of the adapter's weights and config (in the method config and cache key), clone-independent."""
    d = Path(adapter_dir)
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        if (d / name).is_file():
            h.update(name.encode())
            h.update(_canonical_adapter_config(d / name) if name.endswith(".json") else (d / name).read_bytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------ loading
def _hf_backend(backend):
    """The transformers backend under any wrappers (`llm.base.unwrap`): one with a torch model."""
    from ...llm.base import unwrap
    inner = unwrap(backend)
    if inner is not None and "model" in vars(inner) and "tokenizer" in vars(inner):
        return inner
    raise UserError("TAIKC-KBAE needs the transformers backend (a model with LoRA support)",
                    setting="model.backend", fix="use model.backend: hf")


def _synthetic(backend):
    from ...llm.base import unwrap
    from ...llm.synthetic import SyntheticBackend

    inner = unwrap(backend)
    return inner if isinstance(inner, SyntheticBackend) else None


def kbae_unavailable(backend) -> str | None:
    """None when KBAE can train and run on `backend`, else why not (for the table's notes)."""
    if _synthetic(backend) is not None:
        return None
    try:
        _hf_backend(backend)
    except UserError as e:
        return f"{e.what} (this run uses model.backend: {getattr(backend, 'kind', 'other')})"
    return None


def load_kbae_backend(base_backend, adapter_dir):
    """A backend whose model is a COPY of `base_backend`'s with the adapter merged in (the base keeps
    answering TAIKC's other prompts unadapted), cached like the base; the adapter's hash is part of
    its fingerprint, so a retrained adapter never hits old entries."""
    from ...llm.cache import CachedBackend

    d = Path(adapter_dir)
    if not (d / "adapter_config.json").is_file():
        raise DataMissingError(f"no KBAE adapter in {d}", path=d, setting="taikc-kbae.kbae_adapter",
                               fix="train one with seakr_repro.methods.taikc.kbae.bootstrap_adapter")
    fp = adapter_fingerprint(d)
    synthetic = _synthetic(base_backend)
    if synthetic is not None:
        from ...llm.replay import adapted
        from ...llm.synthetic import SyntheticBackend
        # a dry run replaying a real run: that run's adapted model's calls (`llm.replay`)
        backend = adapted(base_backend, "kbae") or \
            SyntheticBackend(f"{synthetic.name}+kbae-{fp}", synthetic.n_layers, synthetic.hidden_size)
    else:
        from peft import PeftModel

        from ...llm.hf.backend import HFBackend
        inner = _hf_backend(base_backend)
        with _quiet_peft():
            model = PeftModel.from_pretrained(copy.deepcopy(inner.model), str(d)).merge_and_unload()
        backend = HFBackend(model, inner.tokenizer, name=f"{inner.name}+kbae-{fp}",
                            fingerprint=f"{inner.fingerprint}+kbae-{fp}",
                            max_batch_rows=inner.max_batch_rows, max_batch_contexts=inner.max_batch_contexts)
    if isinstance(base_backend, CachedBackend):
        root = Path(base_backend.cache.root).parent / backend.name   # beside the base's entries
        return CachedBackend(backend, root=root, enabled=base_backend.enabled)
    return backend


def bootstrap_adapter(backend, single_hop_records, out_dir, *, criterion: str = "acc",
                      **train_kw) -> Path:
    """build_kbae_data + train_lora, reused when `out_dir`'s manifest shows the same examples and settings."""
    examples = build_kbae_data(backend, single_hop_records, criterion=criterion)
    out = Path(out_dir)
    wanted = {"data_sha": examples_sha(examples), "criterion": criterion,
              **{k: v for k, v in train_kw.items() if isinstance(v, (int, float, str))}}
    with contextlib.suppress(OSError, ValueError):
        have = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        if all(have.get(k) == v for k, v in wanted.items()):
            return out
    if _synthetic(backend) is not None:         # nothing to tune (the module's note)
        out.mkdir(parents=True, exist_ok=True)
        (out / "adapter_config.json").write_text(json.dumps({"synthetic": wanted}) + "\n", encoding="utf-8")
        (out / MANIFEST).write_text(json.dumps(wanted) + "\n", encoding="utf-8")
        return out
    inner = _hf_backend(backend)
    train_lora(inner.model, inner.tokenizer, examples, out, **train_kw,
               extra_manifest={"criterion": criterion, "base_model": inner.name,
                               "examples": [ex.to_dict() for ex in examples]})
    return out
