"""Self-RAG as run_short_form.py runs it, behaviour by behaviour, with hand-built probabilities
(a scripted backend whose continuations are token lists and whose reflection-token probabilities
are given per position), and `read_logprobs` on a tiny LLaMA."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fakes import FakeSearcher, hit
from seakr_repro.core.config import load_config
from seakr_repro.core.errors import DataMissingError, QuestionError, UserError
from seakr_repro.data.records import QuestionRecord
from seakr_repro.llm.base import Generation
from seakr_repro.llm.reflection_tokens import NO_RETRIEVE, REL, RETRIEVE, SKIPPED_IN_TEXT, SUP, USE
from seakr_repro.methods import build_method
from seakr_repro.methods.self_rag import SelfRAG, answer_text, retrieve_score

Q = QuestionRecord(id="q1", question="Who directed Zorro Nights?", answers=["Ann Lee"])
DOCS = [hit("d1", "Zorro Nights was directed by Ann Lee."), hit("d2", "Ann Lee is a director."),
        hit("d3", "Other text.")]
EOS = 2


class Scripted:
    """Continuations as token lists (each token a string; the special ones have ids of their
    own); `probs(prefix, position)` -> {token: p} of the reflection tokens there (the rest of the
    mass on other tokens); `eos_p` the probability of EOS after the last token."""

    name = "selfrag_llama2_7b"
    n_layers, hidden_size, eos_token_id = 4, 16, EOS

    def __init__(self, respond, probs, eos_p=0.5, token_p=0.8):
        self.respond, self.probs, self.eos_p, self.token_p = respond, probs, eos_p, token_p
        self.vocab = {t: 10 + i for i, t in enumerate(SKIPPED_IN_TEXT)}
        self.generated: list[str] = []
        self.reads: list[tuple] = []

    def _id(self, tok):
        return self.vocab.setdefault(tok, 10 + len(self.vocab))

    def encode_plain(self, text):
        return [self._id(text)]

    def generate(self, prompt, *, max_new_tokens, stop=(), want_stats=False, want_attention=False):
        self.generated.append(prompt)
        toks, finish = self.respond(prompt)
        return Generation(text="".join(toks), token_ids=[self._id(t) for t in toks], tokens=list(toks),
                          logprobs=[math.log(self.token_p)] * len(toks), finish_reason=finish)

    def read_logprobs(self, prompt, continuation_ids, reads):
        self.reads.append((prompt, list(continuation_ids), list(reads)))
        names = {v: k for k, v in self.vocab.items()}
        out = []
        for pos, t in reads:
            if t == EOS:
                out.append(math.log(self.eos_p))
            else:
                out.append(math.log(self.probs(prompt, pos)[names[t]]))
        return Generation(text="", logprobs=out)


def table(p_ret=0.5, rel=(0.9, 0.1), sup=(0.8, 0.1, 0.1), use=(0.01, 0.01, 0.02, 0.06, 0.6)):
    t = {RETRIEVE: p_ret, NO_RETRIEVE: 1 - p_ret, REL[0]: rel[0], REL[1]: rel[1]}
    t.update(zip(SUP, sup))
    t.update(zip(USE, use))
    return t


def run(respond, probs, docs=DOCS, **settings):
    b, s = Scripted(respond, probs), FakeSearcher(docs)
    return build_method("self-rag", b, s, "bundled-2wiki", **settings).run(Q), b, s


def said(*toks, finish="eos"):
    return lambda prompt: (list(toks), finish)


# -- the retrieval decision ----------------------------------------------------------------------
def test_retrieve_score_faithful_divides_log_probs():
    lp9, lp1 = math.log(0.9), math.log(0.1)
    assert retrieve_score(lp9, lp1, "faithful") == pytest.approx(0.044, abs=1e-3)
    assert retrieve_score(lp1, lp9, "faithful") == pytest.approx(0.956, abs=1e-3)
    assert retrieve_score(lp9, lp1, "fixed") == pytest.approx(0.9)


@pytest.mark.parametrize("mode,p_ret,retrieves", [("faithful", 0.9, False), ("faithful", 0.1, True),
                                                  ("fixed", 0.9, True), ("fixed", 0.1, False)])
def test_adaptive_decision_by_mode(mode, p_ret, retrieves):
    r, b, s = run(said("[Relevant]", "Ann", " Lee"), lambda p, i: table(p_ret), mode=mode)
    assert (len(s.queries) == 1) is retrieves and r.n_retrievals == int(retrieves)
    assert b.reads[0][1:] == ([], [(0, b.vocab[RETRIEVE]), (0, b.vocab[NO_RETRIEVE])])
    assert r.trace[0]["retrieve"] is retrieves and r.extra["p_retrieval"] == pytest.approx(p_ret)


def test_retrieval_always_and_never():
    r, b, s = run(said("Tom"), lambda p, i: table(0.0001), retrieval="always", mode="fixed")
    assert len(s.queries) == 1 and r.n_retrievals == 1 and len(b.generated) == 3
    r, b, s = run(said("Tom"), lambda p, i: table(0.9999), retrieval="never", mode="fixed")
    assert s.queries == [] and b.generated == [SelfRAG.prompt(Q.question) + NO_RETRIEVE]
    assert r.answer == "Tom" and b.reads == []


def test_without_retrieval_the_answer_follows_no_retrieval_token():
    r, b, s = run(said("Tom", " Hux", "[Utility:5]"), lambda p, i: table(0.1), mode="fixed")
    assert b.generated == ["### Instruction:\nWho directed Zorro Nights?\n\n### Response:\n[No Retrieval]"]
    assert r.answer == "Tom Hux" and r.raw_output == "Tom Hux"


# -- the critique of each passage's continuation --------------------------------------------------
def test_passage_prompt_and_score_by_hand():
    toks = ["[Relevant]", "Ann", " Lee", "[Fully supported]", "[Utility:5]"]
    r, b, s = run(said(*toks), lambda p, i: table(), retrieval="always", ndocs=1)
    prefix = ("### Instruction:\nWho directed Zorro Nights?\n\n### Response:\n"
              "[Retrieval]<paragraph>Td1\nZorro Nights was directed by Ann Lee.</paragraph>")
    assert b.generated == [prefix]
    # relevance at position 0, support where [Fully supported] was generated (3), utility at 4,
    # EOS after the last token
    assert [pos for pos, _ in b.reads[0][2]] == [0, 0, 3, 3, 3, 4, 4, 4, 4, 4, 5]
    c = r.trace[-1]["candidates"][0]
    seq = (5 * math.log(0.8) + math.log(0.5)) / 6           # EOS counted, as vLLM's token ids
    use = sum(w * p / 0.7 for w, p in zip((-1, -0.5, 0, 0.5, 1), (0.01, 0.01, 0.02, 0.06, 0.6)))
    assert c["seq"] == pytest.approx(seq) and c["isrel"] == pytest.approx(0.9)
    assert c["issup"] == pytest.approx(0.8 + 0.05) and c["isuse"] == pytest.approx(use)
    assert c["score"] == pytest.approx(math.exp(seq) + 0.9 + 0.85 + use)
    assert r.answer == "Ann Lee"     # special tokens are not in the text


def test_support_and_utility_read_where_first_generated():
    toks = ["[Utility:2]", "Ann", "[Partially supported]", " Lee", "[Fully supported]", "[Utility:5]"]
    r, b, s = run(said(*toks, finish="length"), lambda p, i: table(), retrieval="always", ndocs=1)
    assert [pos for pos, _ in b.reads[0][2]] == [0, 0, 2, 2, 2, 0, 0, 0, 0, 0]   # no EOS read
    c = r.trace[-1]["candidates"][0]
    assert (c["sup_at"], c["use_at"]) == (2, 0)
    assert c["seq"] == pytest.approx(math.log(0.8))


def test_missing_critique_tokens_score_zero():
    r, b, s = run(said("[Relevant]", "Ann"), lambda p, i: table(), retrieval="always", ndocs=1)
    c = r.trace[-1]["candidates"][0]
    assert c["issup"] == 0.0 and c["isuse"] == 0.0 and c["sup_at"] is None
    assert c["score"] == pytest.approx(math.exp(c["seq"]) + 0.9)


def test_switches_drop_terms():
    toks = ["[Relevant]", "Ann", "[Fully supported]", "[Utility:5]"]
    r, *_ = run(said(*toks), lambda p, i: table(), retrieval="always", ndocs=1,
                use_seqscore=False, use_groundness=False, use_utility=False, w_rel=2.0)
    c = r.trace[-1]["candidates"][0]
    assert c["issup"] == 0.0 and c["isuse"] == 0.0 and c["score"] == pytest.approx(2 * 0.9)


def test_best_score_wins_and_first_on_tie():
    def probs(prefix, pos):
        return table(rel=(0.9, 0.1) if "director." in prefix else (0.2, 0.8))
    r, *_ = run(said("[Relevant]", "x"), probs, retrieval="always")
    assert r.extra["chosen"] == "d2"
    r, *_ = run(said("[Relevant]", "Ann"), lambda p, i: table(), retrieval="always")
    assert r.extra["chosen"] == "d1"


def test_no_passage_answers_without_retrieval():
    r, b, s = run(said("Tom"), lambda p, i: table(0.5), docs=[], mode="fixed")
    assert r.answer == "Tom" and len(s.queries) == 1 and r.n_retrievals == 1
    assert r.extra["no_hits"] and [t["kind"] for t in r.trace][-2:] == ["no_hits", "no_retrieval"]


# -- the answer's text ----------------------------------------------------------------------------
def test_answer_text_faithful_and_fixed():
    assert answer_text("Ann\nLee", retrieved=False, mode="faithful") == "AnnLee"
    assert answer_text(" Ann\nLee", retrieved=True, mode="faithful") == " Ann\nLee"
    assert answer_text("#Ann", retrieved=True, mode="faithful") == "Ann"
    assert answer_text(":Ann[Continue to Use Evidence]", False, "faithful") == "Ann[Continue to Use Evidence]"
    assert answer_text(" Ann\nLee [Continue to Use Evidence]", False, "fixed") == "Ann Lee"
    assert answer_text("#", True, "faithful") == "" and answer_text("", False, "faithful") == ""


def test_unknown_settings_refused():
    with pytest.raises(UserError, match="self_rag.mode"):
        run(said("x"), lambda p, i: table(), mode="paper")
    with pytest.raises(UserError, match="self_rag.retrieval"):
        run(said("x"), lambda p, i: table(), retrieval="sometimes")


def test_profiles():
    paper, default = load_config("paper"), load_config("default")
    assert SelfRAG.settings_from(paper) == {
        "mode": "faithful", "retrieval": "adaptive", "threshold": 0.2, "ndocs": 10,
        "max_new_tokens": 100, "w_rel": 1.0, "w_sup": 1.0, "w_use": 1.0, "use_seqscore": True,
        "use_groundness": True, "use_utility": True, "passages": "index", "input_files": {}}
    assert SelfRAG.settings_from(default)["mode"] == "fixed"


# -- passages from the input file, as run_short_form.py reads them ------------------------------
INPUT = Path(__file__).parent / "fixtures" / "self_rag" / "input.jsonl"   # the authors' format


def from_input(path=INPUT, dataset="bundled-2wiki", **settings):
    settings = {"passages": "input", "input_files": {dataset: str(path)}, "retrieval": "always",
                "mode": "fixed", **settings}
    b, s = Scripted(said("[Relevant]", "Ann", " Lee"), lambda p, i: table()), FakeSearcher(DOCS)
    return build_method("self-rag", b, s, dataset, **settings), b, s


def paragraphs(path):
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return {r["question"]: [f"[Retrieval]<paragraph>{c['title']}\n{c['text']}</paragraph>" for c in r["ctxs"]]
            for r in rows}


@pytest.mark.parametrize("ndocs", [2, 10])
def test_input_passages_are_the_files_ctxs_in_order(ndocs):
    """passages: input critiques the question's first ndocs ctxs of the input file, each as
    "[Retrieval]<paragraph>{title}\n{text}</paragraph>" after the prompt; the index is not searched."""
    method, b, s = from_input(ndocs=ndocs)
    r = method.run(Q)
    base = SelfRAG.prompt(Q.question)
    assert s.queries == [] and r.n_retrievals == 1
    assert b.generated == [base + p for p in paragraphs(INPUT)[Q.question][:ndocs]]
    assert [c["id"] for c in r.trace[-1]["candidates"]] == ["8812", "301", "77"][:ndocs]
    assert method.config["passages"] == "input" and method.config["input_file"] == str(INPUT)
    assert "input_files" not in method.config


def test_input_file_as_a_json_list_and_top_contexts(tmp_path):
    """A .json file is one JSON list (the script's json.load), anything else JSON lines; a record
    without ctxs uses top_contexts, as process_data_evidences does."""
    rows = [json.loads(line) for line in INPUT.read_text().splitlines()]
    rows[0]["top_contexts"] = rows[0].pop("ctxs")
    (tmp_path / "input.json").write_text(json.dumps(rows))
    method, b, _ = from_input(tmp_path / "input.json", ndocs=3)
    method.run(Q)
    assert b.generated == [SelfRAG.prompt(Q.question) + p for p in paragraphs(INPUT)[Q.question]]


def test_index_passages_keep_the_runs_key():
    """The default searches the index, and its config is what it was before the setting existed."""
    r, b, s = run(said("Tom"), lambda p, i: table(), retrieval="always", mode="fixed")
    assert len(s.queries) == 1
    method = build_method("self-rag", Scripted(said("x"), lambda p, i: table()), FakeSearcher(DOCS),
                          "bundled-2wiki")
    assert not {"passages", "input_files", "input_file"} & set(method.config)


def bad_input(tmp_path, edit, name="input.jsonl"):
    rows = [json.loads(line) for line in INPUT.read_text().splitlines()]
    edit(rows)
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize("edit, where, says", [
    (lambda rows: rows[1].pop("ctxs"), "line 2", "'ctxs' is missing"),
    (lambda rows: rows[1].update(ctxs=[]), "line 2", "'ctxs' is empty"),
    (lambda rows: rows[0]["ctxs"][1].pop("title"), "line 1", "ctxs[1] has no key 'title'"),
])
def test_an_input_file_without_passages_names_file_line_and_fix(tmp_path, edit, where, says):
    path = bad_input(tmp_path, edit)
    with pytest.raises(UserError) as err:
        from_input(path)
    text = err.value.paragraph()
    assert f"file {path}, {where}" in text and says in text and "Fix:" in text


def test_a_missing_input_file_or_question_is_named(tmp_path):
    with pytest.raises(DataMissingError) as err:
        from_input(tmp_path / "nosuch.jsonl")
    text = err.value.paragraph()
    assert "nosuch.jsonl" in text and "self_rag.input_files.bundled-2wiki" in text and "Fix:" in text
    with pytest.raises(UserError, match="self_rag.input_files.bundled-hotpotqa"):
        from_input(dataset="bundled-hotpotqa", input_files={"bundled-2wiki": str(INPUT)})
    method, *_ = from_input()
    with pytest.raises(QuestionError, match="not in the Self-RAG input file"):
        method.run(QuestionRecord(id="q2", question="Who wrote Other?", answers=["X"]))


def test_profile_settings_of_the_input_passages():
    cfg = load_config("default", {"self_rag.passages": "input",
                                  "self_rag.input_files.bundled-2wiki": str(INPUT)})
    assert SelfRAG.settings_from(cfg)["input_files"] == {"bundled-2wiki": str(INPUT)}
    with pytest.raises(UserError, match="self_rag.passages"):
        load_config("default", {"self_rag.passages": "contriever"})
    with pytest.raises(UserError, match="self_rag.input_files"):
        load_config("default", {"self_rag.input_files.nosuch": "x.jsonl"})


# -- read_logprobs on a real model ----------------------------------------------------------------
def test_read_logprobs_matches_a_forward_pass(tmp_path):
    import torch

    from llama_tok import build_backend
    from seakr_repro.llm.cache import CachedBackend

    b = build_backend(tmp_path)
    prompt, cont = "Who directed it?", [300, 301, 302]
    got = b.read_logprobs(prompt, cont, [(0, 5), (2, 7), (3, EOS)]).logprobs
    with torch.no_grad():
        ids = b._encode(prompt)
        logp = torch.log_softmax(b.model(input_ids=torch.tensor([ids + cont])).logits[0].float(), -1)
    n = len(ids) - 1
    assert got == pytest.approx([float(logp[n, 5]), float(logp[n + 2, 7]), float(logp[n + 3, EOS])],
                                abs=1e-5)
    with pytest.raises(ValueError):
        b.read_logprobs(prompt, cont, [(4, 5)])
    cached = CachedBackend(b, root=tmp_path / "cache")
    first = cached.read_logprobs(prompt, cont, [(1, 9)]).logprobs
    assert cached.read_logprobs(prompt, cont, [(1, 9)]).logprobs == first and cached.hits == 1


def test_preflight_reads_the_input_files(tmp_path):
    from seakr_repro.runs.preflight import Report, check_self_rag_inputs

    broken = bad_input(tmp_path, lambda rows: rows[1].pop("ctxs"))
    cfg = load_config("smoke", {"datasets.complex": ["bundled-2wiki", "bundled-hotpotqa"], "datasets.simple": [],
                                "self_rag.passages": "input",
                                "self_rag.input_files.bundled-2wiki": str(INPUT),
                                "self_rag.input_files.bundled-hotpotqa": str(broken)})
    report = Report()
    check_self_rag_inputs(cfg, report)
    assert report.ok == [f"Self-RAG's passages of bundled-2wiki ({INPUT}: 2 questions)"]
    assert len(report.problems) == 1 and f"file {broken}, line 2" in report.problems[0]
    report = Report()
    check_self_rag_inputs(load_config("smoke", {"datasets.complex": ["bundled-2wiki"], "datasets.simple": [],
                                                "self_rag.passages": "input"}), report)
    assert "self_rag.input_files.bundled-2wiki" in report.problems[0] and not report.ok
    report = Report()
    check_self_rag_inputs(load_config("smoke"), report)      # index: nothing to read
    assert report.ok == report.problems == []
