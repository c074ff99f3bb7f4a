"""KBAE: bootstrapped labels (correct -> the model's answer, wrong -> RAG_REQUIRED) and a LoRA run
on a tiny random Llama with a word-level tokenizer (seconds on CPU)."""
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from fakes import FakeBackend  # noqa: E402
from seakr_repro.data.records import QuestionRecord  # noqa: E402
from seakr_repro.methods.taikc import kbae  # noqa: E402
from seakr_repro.methods.taikc.prompts import RAG_REQUIRED, confident_qa_prompt, direct_qa_prompt  # noqa: E402

RECORDS = [QuestionRecord("a", "What is the capital of France?", ["Paris"]),
           QuestionRecord("b", "What is the capital of Italy?", ["Rome"], aliases=["Roma"]),
           QuestionRecord("c", "Who wrote Hamlet?", ["William Shakespeare"]),
           QuestionRecord("d", "No gold here?", [])]
REPLIES = {"What is the capital of France?": " Paris.\n", "What is the capital of Italy?": "London",
           "Who wrote Hamlet?": "It was William Shakespeare"}


def fake():
    def respond(prompt, stop):
        q = prompt.split("Here is the question you need to handle: ")[1].split("\n")[0]
        return REPLIES[q]
    return FakeBackend(respond)


def test_build_kbae_data_labels_from_direct_qa():
    backend = fake()
    data = kbae.build_kbae_data(backend, RECORDS)
    assert [c[0] for c in backend.generate_calls] == [direct_qa_prompt(r.question) for r in RECORDS[:3]]
    assert [(e.id, e.direct_answer, e.correct, e.target) for e in data] == [
        ("a", "Paris", True, "Paris"),                       # correct -> the same answer
        ("b", "London", False, RAG_REQUIRED),                # wrong -> the retrieval identifier
        ("c", "It was William Shakespeare", True, "It was William Shakespeare")]
    assert all(e.prompt == confident_qa_prompt(e.question) for e in data)   # Confident QA input
    strict = kbae.build_kbae_data(fake(), RECORDS, criterion="em")
    assert [e.target for e in strict] == ["Paris", RAG_REQUIRED, RAG_REQUIRED]
    with pytest.raises(Exception, match="criterion"):
        kbae.build_kbae_data(fake(), RECORDS, criterion="f1")


# ---------------------------------------------------------------------------------- tiny model
@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A tiny model gains nothing from threads, and on a busy 2-core machine they spin-wait
    (25 updates: 0.5 s on one thread, 8 s on two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    """A word-level tokenizer over the training texts and a 2-layer Llama with hidden size 32
    (initializer_range 0.5: with the default 0.02 the frozen output layer caps the logits near
    uniform, so no adapter could lower the loss)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = [confident_qa_prompt(r.question) + " Paris Rome RAG_REQUIRED William Shakespeare"
             for r in RECORDS]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["<pad>", "<eos>", "<unk>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, initializer_range=0.5, eos_token_id=1,
                      pad_token_id=0, bos_token_id=1)
    return LlamaForCausalLM(cfg).eval(), tokenizer


def examples():
    return [kbae.KBAEExample(r.id, r.question, t, t != RAG_REQUIRED, confident_qa_prompt(r.question), t)
            for r, t in zip(RECORDS, ["Paris", RAG_REQUIRED, "William Shakespeare", RAG_REQUIRED])]


def test_shared_prefix_loss_equals_the_per_example_loss(tiny):
    model, tokenizer = tiny
    pairs = [kbae._encode(tokenizer, e, 512) for e in examples()]
    n = kbae._shared_prefix(pairs)
    assert 10 < n < min(len(p) for p, _ in pairs)
    total, count = 0.0, 0
    with torch.no_grad():
        shared = kbae._loss(model, pairs, 0, n).item()
        plain = kbae._loss(model, pairs, 0, 0).item()
        for p, t in pairs:    # reference: each full sequence alone, target tokens only
            logits = model(input_ids=torch.tensor([p + t])).logits[0, len(p) - 1:-1]
            total += torch.nn.functional.cross_entropy(logits, torch.tensor(t), reduction="sum").item()
            count += len(t)
    assert shared == pytest.approx(total / count, rel=1e-5) and plain == pytest.approx(shared, rel=1e-5)


@pytest.mark.filterwarnings("error::FutureWarning")   # notebook 10 shows no deprecation noise
def test_train_lora_lowers_loss_saves_atomically_and_loads(tiny, tmp_path):
    from seakr_repro.llm.hf.backend import HFBackend

    model, tokenizer = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = tmp_path / "adapter"
    res = kbae.train_lora(model, tokenizer, examples(), out, steps=25, lr=1e-2, r=4, alpha=8,
                          batch_size=4, seed=0)
    assert res.steps == 25 and len(res.losses) == 25
    assert sum(res.losses[-3:]) / 3 < 0.5 * sum(res.losses[:3]) / 3
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    manifest = json.loads((out / kbae.MANIFEST).read_text())
    assert manifest["n_examples"] == 4 and manifest["n_rag_required"] == 2 and manifest["r"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]       # no temporary left over
    # the base model is handed back untouched (LoRA removed, not merged)
    assert not any("lora" in k for k in model.state_dict())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    base = HFBackend(model, tokenizer, name="tiny")
    adapted = kbae.load_kbae_backend(base, out)
    assert adapted.name.startswith("tiny+kbae-") and adapted.model is not base.model
    for ex in examples():
        target = ex.target
        gain = sum(adapted.score(ex.prompt, target).logprobs) - sum(base.score(ex.prompt, target).logprobs)
        assert gain > 1
    ex = examples()[1]
    assert adapted.generate(ex.prompt, max_new_tokens=4).text.strip() == RAG_REQUIRED
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    # retraining onto the same directory replaces it whole
    again = kbae.train_lora(model, tokenizer, examples()[:2], out, steps=2, lr=1e-3, r=4, alpha=8,
                            batch_size=2)
    assert json.loads((out / kbae.MANIFEST).read_text())["n_examples"] == 2 and again.steps == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
    assert kbae.adapter_fingerprint(out) != "" and len(kbae.adapter_fingerprint(out)) == 16


def test_bootstrap_adapter_reuses_a_matching_adapter(tiny, tmp_path):
    from seakr_repro.llm.hf.backend import HFBackend

    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, name="tiny")
    out = kbae.bootstrap_adapter(backend, RECORDS[:2], tmp_path / "a", steps=2, lr=1e-3, r=2,
                                 alpha=4, batch_size=2)
    manifest = json.loads((out / kbae.MANIFEST).read_text())
    assert manifest["criterion"] == "acc" and len(manifest["examples"]) == 2
    stamp = (out / kbae.MANIFEST).stat().st_mtime_ns
    kbae.bootstrap_adapter(backend, RECORDS[:2], out, steps=2, lr=1e-3, r=2, alpha=4, batch_size=2)
    assert (out / kbae.MANIFEST).stat().st_mtime_ns == stamp                 # reused, not retrained
    kbae.bootstrap_adapter(backend, RECORDS[:2], out, steps=3, lr=1e-3, r=2, alpha=4, batch_size=2)
    assert json.loads((out / kbae.MANIFEST).read_text())["steps"] == 3      # settings changed


def test_adapter_fingerprint_ignores_the_clone_path_and_set_order(tmp_path):
    """The same adapter saved from two clones (another absolute base-model path, peft's module set
    in another order) has one fingerprint, so its run file keeps its name; other weights do not."""
    import json
    fingerprints = []
    for i, (path, modules) in enumerate((("/a/clone/model", ["q_proj", "v_proj"]),
                                         ("/b/other/model", ["v_proj", "q_proj"]))):
        d = tmp_path / str(i)
        d.mkdir()
        (d / "adapter_config.json").write_text(json.dumps(
            {"base_model_name_or_path": path, "target_modules": modules, "r": 8}))
        (d / "adapter_model.safetensors").write_bytes(b"weights")
        fingerprints.append(kbae.adapter_fingerprint(d))
    assert fingerprints[0] == fingerprints[1]
    (tmp_path / "1" / "adapter_model.safetensors").write_bytes(b"other weights")
    assert kbae.adapter_fingerprint(tmp_path / "1") != fingerprints[0]
