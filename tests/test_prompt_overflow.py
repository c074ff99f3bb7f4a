"""Prompts longer than the model's context: the oldest passages go first, then few-shot demos
from the front, recorded in the run row; what still does not fit is refused by a specific error
(ContextOverflowError), by the fitting helper and by both backends, never truncated silently."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fakes import FakeBackend, FakeSearcher, hit  # noqa: E402

from seakr_repro.data.records import QuestionRecord  # noqa: E402
from seakr_repro.llm.tokenizing import ContextOverflowError  # noqa: E402
from seakr_repro.methods import build_method  # noqa: E402
from seakr_repro.prompts import TWOWIKI, PromptFitter, build_prompt  # noqa: E402
from seakr_repro.llm.sampling_settings import Sampling  # noqa: E402

Q = QuestionRecord(id="q1", question="Who directed the film Zorro Nights?", answers=["Ann Lee"])
LONG = " ".join(["filler"] * 60)
DOCS = [hit(f"d{i}", f"Passage {i} says Ann Lee directed Zorro Nights. {LONG}") for i in range(1, 4)]


class SmallContext(FakeBackend):
    """A scripted backend with a short context (tokens = words) that checks every call fits."""

    def __init__(self, respond, max_context, level=lambda p: "low"):
        super().__init__(respond, level)
        self.max_context, self.calls = max_context, []

    def _check(self, prompt, n_new):
        self.calls.append((prompt, n_new))
        assert self.count_tokens(prompt) + n_new <= self.max_context, "prompt over the context"

    def generate(self, prompt, *, max_new_tokens, **kw):
        self._check(prompt, max_new_tokens)
        return super().generate(prompt, max_new_tokens=max_new_tokens, **kw)

    def sample(self, prompt, settings):
        self._check(prompt, settings.max_new_tokens + 1)
        return super().sample(prompt, settings)


def words(text):
    return len(text.split())


def test_fitter_drops_oldest_passages_then_demos_from_the_front():
    demos = list(TWOWIKI[:3])
    docs = [f"doc{i} " + LONG for i in range(3)]
    whole = build_prompt(demos, Q.question, ["Step one."], docs)
    fit = PromptFitter(SimpleNamespace(max_context=words(whole) + 10, count_tokens=words, name="m"))
    assert fit(demos, Q.question, ["Step one."], docs, reserve=10) == whole   # fits: untouched
    assert fit.record() == {}
    fit.max_context = words(whole) - 5                # one passage too many
    p = fit(demos, Q.question, ["Step one."], docs, reserve=10)
    assert p == build_prompt(demos, Q.question, ["Step one."], docs[1:])
    no_docs = build_prompt(demos, Q.question, ["Step one."])
    fit.max_context = words(no_docs) + 10 - 1         # all passages and the first demo go
    p = fit(demos, Q.question, ["Step one."], docs, suffix=" So the answer is ", reserve=10)
    assert p == build_prompt(demos[1:], Q.question, ["Step one."]) + " So the answer is "
    assert fit.record() == {"prompt_overflow": {"prompts_shortened": 2, "max_passages_dropped": 3,
                                                "max_demos_dropped": 1}}
    fit.max_context = words(build_prompt([], Q.question, ["Step one."]))   # no room to generate
    with pytest.raises(ContextOverflowError, match="exceeds the .*context of m"):
        fit(demos, Q.question, ["Step one."], docs, reserve=10)


def test_ircot_keeps_the_newest_passages_within_the_context():
    def respond(p, stop):
        return "So the answer is Ann Lee." if "Lee directed it." in p.rsplit("Question:", 1)[1] \
            else "Ann Lee directed it"
    b = SmallContext(respond, max_context=260)
    r = build_method("ircot", b, FakeSearcher(DOCS), "bundled-2wiki", n_shot=2, max_new_tokens=20).run(Q)
    assert r.answer == "Ann Lee" and len(b.calls) >= 2
    last = b.calls[-1][0]
    assert "Passage 3" in last and "Passage 1" not in last          # the oldest went first
    assert r.extra["prompt_overflow"]["max_passages_dropped"] >= 1


def test_seakr_running_context_and_demos_fit_every_call():
    n = {"step": 0}

    def respond(p, stop):
        if ". " not in stop:
            return "Zorro Nights was directed by Ann Lee. So the answer is Ann Lee."
        n["step"] += 1
        return f"Fact number {n['step']} holds"
    b = SmallContext(respond, max_context=400, level=lambda p: "high")
    m = build_method("seakr", b, FakeSearcher(DOCS * 3), "bundled-2wiki", n_shot=4, max_docs=3,
                     max_reasoning_steps=6, sample_max_tokens=30, max_new_tokens=30)
    r = m.run(Q)
    assert r.answer == "Ann Lee" and r.extra["n_docs"] == 3 and b.sample_calls
    over = r.extra["prompt_overflow"]
    assert over["prompts_shortened"] > 0 and over["max_passages_dropped"] >= 1


def test_cot_drops_demonstrations_when_the_question_needs_room():
    b = SmallContext(lambda p, stop: "So the answer is Ann Lee.", max_context=300)
    r = build_method("cot", b, FakeSearcher([]), "bundled-2wiki", n_shot=10, max_new_tokens=50).run(Q)
    assert r.answer == "Ann Lee" and r.extra["prompt_overflow"]["max_demos_dropped"] >= 1
    # a backend that states no context gets every demonstration
    plain = FakeBackend(lambda p, stop: "So the answer is Ann Lee.")
    r = build_method("cot", plain, FakeSearcher([]), "bundled-2wiki", n_shot=10).run(Q)
    assert "prompt_overflow" not in r.extra and plain.generate_calls[0][0].count("Question:") == 11


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import llama_tok
    return llama_tok.build_backend(tmp_path_factory.mktemp("llama"), max_context=160)


def test_the_transformers_backend_refuses_a_prompt_over_its_context(tiny):
    assert tiny.max_context == 160
    long_prompt = "Question: " + "Who directed the film? " * 40
    assert tiny.count_tokens(long_prompt) > 160
    with pytest.raises(ContextOverflowError, match="160-token context of tiny-llama"):
        tiny.generate(long_prompt, max_new_tokens=4)
    with pytest.raises(ContextOverflowError):
        tiny.sample(long_prompt, Sampling(k=2, max_new_tokens=4))
    with pytest.raises(ContextOverflowError):
        tiny.score(long_prompt, " Paris")
    short = "Question: Who directed the film?\nAnswer:"
    n = tiny.count_tokens(short)
    assert tiny.generate(short, max_new_tokens=160 - n).n_prompt_tokens == n     # exactly full
    with pytest.raises(ContextOverflowError):
        tiny.sample(short, Sampling(k=1, max_new_tokens=160 - n))                      # + the forced EOS


def test_the_vllm_backend_refuses_it_the_same_way():
    from seakr_repro.llm.vllm.backend import VLLMBackend
    vb = VLLMBackend.__new__(VLLMBackend)
    vb.name, vb.max_context = "m", 160
    vb._check_len(150, 10)
    with pytest.raises(ContextOverflowError, match="model.vllm.max_model_len"):
        vb._check_len(151, 10)


def test_methods_on_a_short_context_model_run_to_the_end(tiny):
    """The real backend with a 160-token context: IRCoT's passages and CoT's demos are dropped,
    the questions finish, and the row says what was dropped."""
    import torch
    torch.set_num_threads(1)
    docs = [hit(f"d{i}", f"Passage {i}: Ann Lee directed Zorro Nights in 1959.") for i in range(1, 4)]
    r = build_method("ircot", tiny, FakeSearcher(docs), "bundled-2wiki", n_shot=1,
                     max_new_tokens=6, max_steps=2).run(Q)
    assert r.extra["prompt_overflow"]["prompts_shortened"] >= 1
    r = build_method("cot", tiny, FakeSearcher([]), "bundled-2wiki", n_shot=6, max_new_tokens=6).run(Q)
    assert r.extra["prompt_overflow"]["max_demos_dropped"] >= 1
