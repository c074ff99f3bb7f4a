"""The faithful baselines (`baselines.mode: faithful`) see text as DRAGIN's code does (its
src/generate.py, src/data.py, src/retriever.py; issue 21, points 1-6), on the tests' LLaMA-style
sentencepiece tokenizer and a tiny random LLaMA. One test per point, named after what DRAGIN's
code does."""
from types import SimpleNamespace

import pytest

from fakes import FakeBackend, FakeSearcher, hit
from llama_tok import build_backend, build_model, build_tokenizer, continuation_ids, scripted
from seakr_repro.core.errors import DataMissingError, UserError
from seakr_repro.data.records import QuestionRecord
from seakr_repro.methods import build_method
from seakr_repro.methods.base import _QUESTION
from seakr_repro.methods.dragin import attention_query
from seakr_repro.runs import grid
from seakr_repro.llm.sampling_settings import Sampling

Q = QuestionRecord(id="q1", question="Who directed the film Zorro Nights?", answers=["Ann Lee"])
DOCS = [hit("d1", "Zorro Nights was directed by Ann Lee."), hit("d2", "Ann Lee is a director."),
        hit("d3", "Other text.")]

# A stand-in for DRAGIN's src/data.py, written here (not copied): the same structure -- one class
# per data set with a literal `examplars` list and three one-line template lambdas.
DATA_PY = '''
from typing import Dict, List

class BaseDataset:
    pass

class StrategyQA(BaseDataset):
    examplars: List[Dict] = [
        {"question": "Is ice cold?", "cot": ("Ice is frozen. ", "Frozen is cold."), "answer": "yes"}]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Reason first.\\n\\nQuestion: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'

class WikiMultiHopQA(BaseDataset):
    examplars: List[Dict] = [
        {"question": "Who wrote Book A?", "cot": "Book A was written by Tom Ray.", "answer": "Tom Ray"},
        {"question": "Where was Tom Ray born?", "cot": ("Tom Ray was born ", "in Leeds."), "answer": "Leeds"},
        {"question": "Unused third demo?", "cot": "Never shown.", "answer": "no"},
    ]
    demo_input_template = test_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'

class HotpotQA(BaseDataset):
    examplars: List[Dict] = [{"question": "Which band is older?", "cot": "Band X formed first.", "answer": "Band X."}]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Answer step by step, as above.\\nQuestion: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'

class IIRC(BaseDataset):
    examplars: List[Dict] = [{"question": "How old is Ann?", "cot": "Ann is 30.", "answer": "30"}]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'
'''


@pytest.fixture
def dragin_clone(tmp_path):
    (tmp_path / "DRAGIN" / "src").mkdir(parents=True)
    (tmp_path / "DRAGIN" / "src" / "data.py").write_text(DATA_PY, encoding="utf-8")
    return tmp_path / "DRAGIN"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny LLaMA backend (greedy: no generation_config.json) and its tokenizer."""
    backend = build_backend(tmp_path_factory.mktemp("tiny"))
    backend.generation_config = {}
    return backend


class Script:
    def __init__(self, *outputs):
        self.outputs = list(outputs)

    def __call__(self, prompt, stop):
        return self.outputs.pop(0)


def faithful(**more):
    return {"mode": "faithful", **more}


def script_for(backend, text: str, risky: str | None = None, p: float = 0.01):
    """A scripted greedy continuation `text` after "Answer:", the token `risky` (a piece) at p."""
    ids = continuation_ids(backend.tokenizer, "Answer:", " " + text)
    pieces = backend.tokenizer.convert_ids_to_tokens(ids)
    return ids, [p if piece == risky else 0.99 for piece in pieces]


# -- 1. demos ------------------------------------------------------------------------------------
def test_faithful_baselines_prompt_with_dragins_examplars_read_from_the_clone(dragin_clone):
    b = FakeBackend(Script("So the answer is Tom Ray."))
    r = build_method("flare", b, FakeSearcher(DOCS), "bundled-2wiki",
                     **faithful(demos="official", dragin_repo=str(dragin_clone), n_shot=2)).run(Q)
    prompt = b.generate_calls[0][0]
    assert prompt == ("Question: Who wrote Book A?\nAnswer: Book A was written by Tom Ray. So the answer "
                      "is Tom Ray.\nQuestion: Where was Tom Ray born?\nAnswer: Tom Ray was born in "
                      "Leeds. So the answer is Leeds.\n" f"Question: {Q.question}\nAnswer: ")
    assert r.answer == "Tom Ray"
    # HotpotQA's test template (its instruction line) and its demo, answer period included
    b = FakeBackend(Script("So the answer is Tom Ray."))
    build_method("cot", b, FakeSearcher(DOCS), "bundled-hotpotqa",
                 **faithful(demos="official", dragin_repo=str(dragin_clone), n_shot=1)).run(Q)
    assert b.generate_calls[0][0] == ("Question: Which band is older?\nAnswer: Band X formed first. So "
                                      "the answer is Band X..\nAnswer step by step, as above.\n"
                                      f"Question: {Q.question}\nAnswer:")
    # the fixed baselines take SeaKR's official lists (as SeaKR does), never DRAGIN's
    with pytest.raises(DataMissingError, match="prompts.official_repo"):
        build_method("flare", FakeBackend(Script()), FakeSearcher(DOCS), "bundled-2wiki",
                     demos="official", dragin_repo=str(dragin_clone),
                     official_repo=str(dragin_clone.parent / "none")).run(Q)
    # no clone: the error names the setting and how to get it, before any question runs
    with pytest.raises(DataMissingError, match="git clone https://github.com/oneal2000/DRAGIN") as err:
        build_method("dragin", FakeBackend(Script()), FakeSearcher(DOCS), "bundled-2wiki",
                     **faithful(demos="official", dragin_repo=str(dragin_clone.parent / "none")))
    assert err.value.setting == "prompts.dragin_repo"


# -- 2. token strings -------------------------------------------------------------------------------
def test_flare_masks_each_token_decoded_alone(tiny):
    searcher = FakeSearcher(DOCS)
    m = build_method("flare", tiny, searcher, "bundled-2wiki", **faithful())
    with scripted(tiny, [script_for(tiny, "So the answer is tuberculosis.", risky="\u2581tuber")]):
        m.run(Q)
    # DRAGIN's token string is "tuber" (decode([id]) drops the space): the mask leaves the space
    # before it, so the query reads "is culosis.", not "isculosis."
    assert searcher.queries[0] == "So the answer is culosis."


# -- 3. the leading space of a continuation ------------------------------------------------------------
def test_the_continuation_is_read_as_dragins_decode_without_its_leading_space(tiny):
    m = build_method("cot", tiny, FakeSearcher(DOCS), "bundled-2wiki", **faithful())
    with scripted(tiny, [script_for(tiny, "Zorro was made by Ann Lee. So the answer is Ann Lee.")]):
        r = m.run(Q)
    assert r.extra["text"] == "Zorro was made by Ann Lee. So the answer is Ann Lee."
    assert r.trace[0]["output"] == r.extra["text"]


# -- 4. byte-fallback pieces --------------------------------------------------------------------------
def test_dragins_words_keep_byte_fallback_pieces_by_name(tiny):
    ids = tiny.tokenizer("followers; For\u00e7as", add_special_tokens=False)["input_ids"]
    faithful_m = build_method("dragin", tiny, FakeSearcher(DOCS), "bundled-2wiki", **faithful())
    fixed_m = build_method("dragin", tiny, FakeSearcher(DOCS), "bundled-2wiki")
    assert [w for *_, w in faithful_m._words(ids)] == ["followers<0x3B>", "For<0xC3><0xA7>as"]
    assert [w for *_, w in fixed_m._words(ids)] == ["followers;", "For\u00e7as"]
    # such a word fails the content-word match and drops out of DRAGIN's query
    prefix, sent, flags = "The For\u00e7as armadas won the war", ["They", "won."], [0, 1]
    q_faithful, _ = attention_query(tiny, prefix, sent, flags, 25, faithful_m._words)
    q_fixed, _ = attention_query(tiny, prefix, sent, flags, 25, fixed_m._words)
    assert q_fixed == "For\u00e7as armadas won war" and q_faithful == "armadas won war"


# -- 5. query truncation ----------------------------------------------------------------------------
def test_dragins_retriever_keeps_exactly_the_last_64_tokens_of_a_query(tiny):
    tok = tiny.tokenizer
    query = " ".join(["Zorro Nights was directed by tuberculosis Ann Lee"] * 12)
    ids = tok(query, add_special_tokens=False)["input_ids"]
    assert len(ids) > 64
    expected = tok.decode(ids[-64:], skip_special_tokens=True)
    assert expected.split()[0] not in query.split()            # the first word is cut
    for mode, want in (("faithful", expected), ("fixed", None)):
        searcher = FakeSearcher(DOCS)
        m = build_method("flare", tiny, searcher, "bundled-2wiki", mode=mode)
        token = _QUESTION.set(SimpleNamespace(n_search=0))
        try:
            m.retrieve(query)
        finally:
            _QUESTION.reset(token)
        got = searcher.queries[0]
        if want is not None:
            assert got == want
        else:                                                # fixed: whole words only
            assert query.endswith(got) and got.split()[0] in query.split()


# -- 6. precision and decoding ------------------------------------------------------------------------
def test_faithful_baselines_decode_as_the_checkpoints_generation_config_in_float32(tmp_path, tiny):
    # float32 in faithful mode (DRAGIN loads without torch_dtype), the profile's dtype in fixed
    assert grid.model_dtype("flare", {"mode": "faithful"}) == "float32"
    assert grid.model_dtype("dragin", {"mode": "fixed"}) is None
    assert grid.model_dtype("cot", {"mode": "faithful", "dtype": "float16"}) == "float16"
    from seakr_repro.core.config import load_config
    loads = []
    pool = grid.BackendPool(load_config("paper"), loader=lambda cfg, name, *dtype: loads.append(
        (name, *dtype)) or object())
    pool.get(None)
    pool.get(None, "float32")
    pool.get(None, "float32")
    assert loads == [("llama-2-7b-chat",), ("llama-2-7b-chat", "float32")]
    # the checkpoint's generation_config.json is read with the model
    from seakr_repro.llm.hf.backend import HFBackend
    tok = build_tokenizer(tmp_path / "ckpt")
    build_model(len(tok)).save_pretrained(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "generation_config.json").write_text(
        '{"do_sample": true, "temperature": 0.6, "top_p": 0.9, "bos_token_id": 1}')
    backend = HFBackend.from_dir(tmp_path / "ckpt", name="tiny", prefix_cache_tokens=0)
    assert backend.generation_config["temperature"] == 0.6
    # do_sample: the faithful baseline samples with the checkpoint's values (top_k: transformers'
    # default 50), one seed per call of the question, recorded with the dtype in the run row
    r = build_method("cot", backend, FakeSearcher(DOCS), "bundled-2wiki", **faithful()).run(Q)
    dec = {"do_sample": True, "temperature": 0.6, "top_k": 50, "top_p": 0.9}
    assert r.extra["decoding"] == dec and r.extra["dtype"] == "float32"
    m = build_method("cot", backend, FakeSearcher(DOCS), "bundled-2wiki", **faithful())
    want = backend.sample(m.dragin_prompt[0] + m.dragin_prompt[1].case(Q.question), Sampling(k=1,
                          max_new_tokens=64, seed=0, temperature=0.6, top_k=50, top_p=0.9)).samples[0]
    greedy = backend.generate(m.dragin_prompt[0] + m.dragin_prompt[1].case(Q.question),
                              max_new_tokens=64)
    assert r.extra["text"] == backend.decode(want.token_ids) != backend.decode(greedy.token_ids)
    assert m.config["decoding"] == dec                      # part of the run's key
    # no do_sample: greedy, as transformers decodes then; fixed mode: greedy whatever it says
    backend.generation_config = {"temperature": 0.6, "top_p": 0.9}
    assert build_method("cot", backend, FakeSearcher(DOCS), "bundled-2wiki",
                        **faithful()).decoding == {"do_sample": False}
    assert build_method("cot", backend, FakeSearcher(DOCS), "bundled-2wiki").config["decoding"] is None
    # a setting transformers would apply and the package cannot: refused, naming the way out
    backend.generation_config = {"repetition_penalty": 1.2}
    with pytest.raises(UserError, match="repetition_penalty") as err:
        build_method("flare", backend, FakeSearcher(DOCS), "bundled-2wiki", **faithful())
    assert err.value.setting == "baselines.decoding"


def test_efficiency_times_the_faithful_baselines_on_their_float32_model(monkeypatch, tmp_path):
    """Table 7 times each method on the model it runs on in the tables: one load per dtype."""
    from seakr_repro.core import paths
    from seakr_repro.core.config import load_config
    from seakr_repro.steps import tables

    monkeypatch.setattr(paths, "RESULTS_ROOT", tmp_path)
    monkeypatch.setattr(tables, "select_questions", lambda cfg, dataset, n: [Q])
    loads, used = [], []

    def load(cfg, name=None, cache=None, dtype=None):
        backend = FakeBackend(lambda prompt, stop: "So the answer is Ann Lee.")
        backend.dtype = dtype
        loads.append(dtype)
        return backend
    monkeypatch.setattr("seakr_repro.llm.load_backend", load)
    from seakr_repro.runs import runner
    orig = runner.run_method
    monkeypatch.setattr(runner, "run_method", lambda method, records, path, backend, **kw: used.append(
        (method.name, backend.backend.dtype)) or orig(method, records, path, backend=backend, **kw))
    cfg = load_config("paper", {"model.device": "cpu", "prompts.demos": "paper"})
    tables.measure_efficiency(cfg, FakeSearcher(DOCS), ["flare", "seakr", "cot"], ["bundled-2wiki"], 1,
                              progress=False)
    assert loads == [None, "float32"]         # None: the profile's model.dtype (float16)
    assert used == [("seakr", None), ("flare", "float32"), ("cot", "float32")]
