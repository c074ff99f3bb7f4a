"""Tiny stand-ins, in the official formats, for everything the paper profile reads from disk.

`build_raw(root)` writes, under root/raw (what `SEAKR_RAW_DIR` names) and root/models:

- models: a 4-layer random LLaMA saved in float16 with the tests' sentencepiece tokenizer
  (tests/llama_tok.py) as LLaMA-2-7B-chat, a second one as LLaMA-2-7B (a Table 4 backbone; the
  LLaMA-3 backbones stay absent), and a Self-RAG stand-in (the same, with the reflection tokens);
- DPR's `psgs_w100.tsv` (id<TAB>text<TAB>title, header line, texts quoted as DPR's are);
- the dev sets in the layouts the official instructions leave: 2Wiki `2wikimultihopqa/dev.json` +
  `id_aliases.json`, HotpotQA as DRAGIN saves it (`hotpotqa/hotpotqa-dev.json`), IIRC as SeaKR's
  multihop_data.zip holds it (`iirc/iirc_train_dev/dev.json`), DPR's `.qa.csv` question files;
- `singlehop_data/nq_top10.json` (a JSON list), `tq_top10.json` (pandas' column layout) and
  `sq_top10.json` (fewer questions than squad1-test.qa.csv, one of them not in it);
- DPR's `biencoder-nq-dev.json` (gold passages named by ids of the TSV) for notebook 11;
- the training files notebook 10 reads;
- stand-in clones of THU-KEG/SeaKR (`SEAKR/dataset.py`) and oneal2000/DRAGIN (`src/data.py`) with
  the real repositories' file layout and invented example lists.

Every text is invented; nothing of the official repositories or data sets is copied here.

`run_env(root)`, `overrides(made)` and `cli(root, ...)` run the package on them as a user would:
the paper-shaped run (tests/test_paper_shaped_run.py) and its crash test (tests/test_crash_resume.py).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from seakr_repro.core.config import load_config
from seakr_repro.core.paths import REPO_ROOT

FIX = Path(__file__).parent / "fixtures"

CITIES = ["Lisbon", "Oslo", "Quito", "Dakar", "Perth", "Hanoi", "Tunis", "Lima", "Riga", "Baku"]
JOBS = ["painter", "chemist", "sailor", "poet", "architect", "violinist", "surgeon", "botanist"]
WORDS = ("river valley market harbour bridge tower garden library museum castle village forest "
         "island mountain railway festival school theatre orchard lighthouse").split()


def _people(n: int = 40) -> list[dict]:
    rng = random.Random(7)
    first = ["Ada", "Bram", "Cleo", "Dov", "Esme", "Finn", "Gus", "Hana", "Ivo", "Juno"]
    last = ["Quill", "Ostler", "Marr", "Vance", "Thorne", "Kell", "Brandt", "Arlo"]
    out = []
    for i in range(n):
        name = f"{first[i % 10]} {last[i // 10]}"          # 40 distinct names
        out.append({"name": name, "year": 1850 + rng.randrange(120), "city": rng.choice(CITIES),
                    "job": rng.choice(JOBS), "film": f"The {rng.choice(WORDS).title()} of {name.split()[0]}",
                    "pid": str(1000 + 3 * i)})
    return out


def _filler(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_tsv(path: Path, people: list[dict], n_extra: int = 200) -> None:
    """DPR's psgs_w100.tsv: a header, then id, quoted text, title (about 100 words each)."""
    rng = random.Random(11)
    rows = []
    for p in people:
        bio = (f"{p['name']} (born {p['year']} in {p['city']}) was a {p['job']} who directed the film "
               f"{p['film']}. {p['name']} later said \"the {rng.choice(WORDS)} is home\". ")
        rows.append((p["pid"], bio + _filler(rng, 70), p["name"]))
        rows.append((str(int(p["pid"]) + 1), f"{p['film']} is a film directed by {p['name']}. "
                     + _filler(rng, 85), p["film"]))
        rows.append((str(int(p["pid"]) + 2), f"{p['city']} is a city where {p['name']} was born. "
                     + _filler(rng, 85), p["city"]))
    for i in range(n_extra):
        rows.append((str(5000 + i), f"The {rng.choice(WORDS)} of {rng.choice(CITIES)} " + _filler(rng, 90),
                     f"Place {i}"))
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("id\ttext\ttitle\n")
        for pid, text, title in rows:
            fh.write(f'{pid}\t"{text.replace(chr(34), chr(34) * 2)}"\t{title}\n')


def _twowiki(people: list[dict], start: int, n: int) -> tuple[list, list]:
    records, aliases = [], []
    for i, p in enumerate(people[start:start + n]):
        qid = f"Q{900 + start + i}"
        records.append({
            "_id": f"2w{start + i:04d}", "type": "compositional",
            "question": f"Where was the director of film {p['film']} born?",
            "context": [[p["film"], [f"{p['film']} is a film directed by {p['name']}."]],
                        [p["name"], [f"{p['name']} was born in {p['city']}."]]],
            "supporting_facts": [[p["film"], 0], [p["name"], 0]],
            "evidences": [[p["film"], "director", p["name"]], [p["name"], "place of birth", p["city"]]],
            "answer": p["city"], "evidences_id": [], "answer_id": qid})
        aliases.append({"Q_id": qid, "aliases": [f"{p['city']} City"], "demonyms": [f"{p['city']}ian"]})
    return records, aliases


def _hotpot(people: list[dict], start: int, n: int) -> list:
    out = []
    for i, p in enumerate(people[start:start + n]):
        q = people[(start + i + 1) % len(people)]
        out.append({"_id": f"hp{start + i:04d}", "answer": p["name"] if p["year"] < q["year"] else q["name"],
                    "question": f"Who was born first, {p['name']} or {q['name']}?",
                    "supporting_facts": [[p["name"], 0], [q["name"], 0]],
                    "context": [[p["name"], [f"{p['name']} was born in {p['year']}."]],
                                [q["name"], [f"{q['name']} was born in {q['year']}."]]],
                    "type": "comparison", "level": "hard"})
    return out


def _iirc(people: list[dict], start: int, n: int) -> list:
    questions = []
    for i, p in enumerate(people[start:start + n]):
        questions.append({"qid": f"ii{start + i:04d}", "question": f"What job did {p['name']} have?",
                          "answer": {"type": "span", "answer_spans": [
                              {"text": p["job"] + " ", "passage": "main", "type": "answer",
                               "start": 0, "end": len(p["job"])}]},
                          "question_links": [p["name"]],
                          "context": [{"passage": "main", "text": p["job"], "indices": [0, 9]}]})
    questions.append({"qid": f"ii{start}-none", "question": "What is unknowable?",
                      "answer": {"type": "none"}, "question_links": [], "context": []})
    return [{"pid": f"p_{start}", "title": "Stand-in article", "text": "Invented.", "links": [],
             "questions": questions}]


def _qa_csv(path: Path, pairs: list[tuple[str, list[str]]]) -> None:
    path.write_text("".join(f"{q}\t{a!r}\n" for q, a in pairs), encoding="utf-8")


def _simple_pairs(people: list[dict], kind: str) -> list[tuple[str, list[str]]]:
    if kind == "nq":
        return [(f"where was {p['name']} born", [p["city"]]) for p in people]
    if kind == "tq":
        return [(f"Which film did {p['name']} direct?", [p["film"]]) for p in people]
    return [(f"In what year was {p['name']} born?", [str(p["year"])]) for p in people]


def _ctxs(people: list[dict], p: dict, key: str) -> list[dict]:
    others = [q for q in people if q is not p][:2]
    return [{key: f"{p['name']} was born in {p['city']} in {p['year']} and directed {p['film']}."}] + \
        [{key: f"{q['name']} was a {q['job']} from {q['city']}."} for q in others]


def write_top10(single: Path, people: list[dict]) -> None:
    """The authors' packed files: nq as a JSON list, tq in pandas' column layout, sq a subset
    of the .qa.csv's questions plus one question that is not in it."""
    nq = [{"question": q, "answers": a, "ctxs": _ctxs(people, p, "doc")}
          for (q, a), p in zip(_simple_pairs(people[:6], "nq"), people[:6])]
    (single / "nq_top10.json").write_text(json.dumps(nq), encoding="utf-8")
    tq = [(q, _ctxs(people, p, "doc")) for (q, _), p in zip(_simple_pairs(people[:6], "tq"), people[:6])]
    (single / "tq_top10.json").write_text(json.dumps(
        {"question": {str(i): q for i, (q, _) in enumerate(tq)},
         "ctxs": {str(i): c for i, (_, c) in enumerate(tq)}}), encoding="utf-8")
    sq = [{"question": q, "ctxs": _ctxs(people, p, "doc")}
          for (q, _), p in zip(_simple_pairs(people[:4], "sq"), people[:4])]
    sq.append({"question": "In what year was Nobody Atall born?", "ctxs": _ctxs(people, people[0], "doc")})
    (single / "sq_top10.json").write_text(json.dumps(sq), encoding="utf-8")


def write_datasets(raw: Path, people: list[dict]) -> None:
    dev, train = people[:6], people[20:26]
    two = raw / "2wikimultihopqa"
    two.mkdir(parents=True)
    recs, aliases = _twowiki(people, 0, 6)
    trecs, taliases = _twowiki(people, 20, 6)
    (two / "dev.json").write_text(json.dumps(recs), encoding="utf-8")
    (two / "train.json").write_text(json.dumps(trecs), encoding="utf-8")
    (two / "id_aliases.json").write_text("".join(json.dumps(a) + "\n" for a in aliases + taliases),
                                         encoding="utf-8")
    hot = raw / "hotpotqa"                        # DRAGIN's download line names the file so
    hot.mkdir()
    (hot / "hotpotqa-dev.json").write_text(json.dumps(_hotpot(people, 0, 6)), encoding="utf-8")
    (hot / "hotpot_train_v1.1.json").write_text(json.dumps(_hotpot(people, 20, 6)), encoding="utf-8")
    iirc = raw / "iirc" / "iirc_train_dev"        # SeaKR's multihop_data.zip keeps the tar's folder
    iirc.mkdir(parents=True)
    (iirc / "dev.json").write_text(json.dumps(_iirc(people, 0, 6)), encoding="utf-8")
    (iirc / "train.json").write_text(json.dumps(_iirc(people, 20, 6)), encoding="utf-8")
    dpr = raw / "dpr"
    dpr.mkdir()
    _qa_csv(dpr / "nq-test.qa.csv", _simple_pairs(dev, "nq"))
    _qa_csv(dpr / "trivia-test.qa.csv", _simple_pairs(dev, "tq"))
    _qa_csv(dpr / "squad1-test.qa.csv", _simple_pairs(dev, "sq"))
    _qa_csv(dpr / "nq-train.qa.csv", _simple_pairs(train, "nq"))
    _qa_csv(dpr / "trivia-train.qa.csv", _simple_pairs(train, "tq"))
    (dpr / "biencoder-squad1-train.json").write_text(json.dumps(
        [{"dataset": "squad1", "question": q, "answers": a, "positive_ctxs": []}
         for q, a in _simple_pairs(train, "sq")]), encoding="utf-8")
    (dpr / "biencoder-nq-dev.json").write_text(json.dumps(
        [{"dataset": "nq_dev_psgs_w100", "question": f"who directed {p['film']}", "answers": [p["name"]],
          "positive_ctxs": [{"title": p["film"], "text": f"{p['film']} is a film directed by {p['name']}.",
                             "score": 1000, "title_score": 1, "passage_id": str(int(p["pid"]) + 1)}],
          "negative_ctxs": [], "hard_negative_ctxs": []} for p in people[30:36]]), encoding="utf-8")
    single = raw / "singlehop_data"
    single.mkdir()
    write_top10(single, people)


DRAGIN_DATA = '''# Stand-in laid out like src/data.py of oneal2000/DRAGIN: the same class names, `examplars`
# lists (cot one string; StrategyQA's a tuple, with ctxs) and one-line template lambdas, with
# invented text. It is read, never run (the import below fails).
import no_such_module_here
from typing import Dict, List


class BaseDataset:
    pass


class StrategyQA(BaseDataset):
    examplars: List[Dict] = [
        {
            'question': 'Can a cat read a map?',
            'ctxs': [(None, "Cats cannot read."), (None, "Reading a map needs reading.")],
            'cot': ('Cats cannot read. ', 'A map must be read. ', 'Thus, a cat cannot read a map.'),
            'answer': 'no',
        },
    ]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Reason step by step as the examples do.\\n\\nQuestion: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'


class WikiMultiHopQA(BaseDataset):
    examplars: List[Dict] = [
        {
            'question': "Where was the director of film Glass Harbour born?",
            'cot': "Glass Harbour was directed by Ivo Kell. Ivo Kell was born in Lisbon.",
            'answer': "Lisbon",
        },
        {
            'question': "Who was born first, Ada Quill or Bram Ostler?",
            'cot': "Ada Quill was born in 1901. Bram Ostler was born in 1899. Thus, Bram Ostler was born first.",
            'answer': "Bram Ostler",
        },
        {
            'question': "Are the Vell and the Orn in the same country?",
            'cot': "The Vell is in Norland. The Orn is in Norland. Thus, they are in the same country.",
            'answer': "yes",
        },
    ]
    demo_input_template = test_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'


class HotpotQA(BaseDataset):
    examplars: List[Dict] = [
        {
            'question': "Which river is longer, the Vell or the Orn?",
            'cot': "The Vell is 210 km long. The Orn is 95 km long. Thus, the Vell is longer.",
            'answer': "the Vell",
        },
        {
            'question': "What instrument does the founder of the Nym Quartet play?",
            'cot': "The Nym Quartet was founded by Lio Brandt. Lio Brandt plays the cello.",
            'answer': "cello",
        },
        {
            'question': "In which city was the architect of the Kell Tower born?",
            'cot': "The Kell Tower was designed by Esme Marr. Esme Marr was born in Riga.",
            'answer': "Riga",
        },
    ]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Reason step by step as above.\\nQuestion: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'


class IIRC(BaseDataset):
    examplars: List[Dict] = [
        {
            "question": "How old was Tess Arlo when her band formed?",
            "cot": "Tess Arlo was born in 1970. Her band formed in 1990. So she was 1990 - 1970 = 20.",
            "answer": "20"
        },
        {
            "question": "How many years did the ship Orn Star sail?",
            "cot": "The Orn Star was launched in 1811. It was broken up in 1864. So it sailed 1864 - 1811 = 53 years.",
            "answer": "53"
        },
        {
            "question": "Which league did the club of Finn Vance play in?",
            "cot": "Finn Vance played for Riga United. Riga United played in the Baltic League.",
            "answer": "Baltic League"
        },
    ]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'
'''


def write_clones(raw: Path) -> None:
    shutil.copytree(FIX / "official_repo", raw / "SeaKR")
    for name in ("main_simpleqa.py", "main_multihop.py", "build_wiki_index.py", "README.md",
                 "SEAKR/__init__.py", "SEAKR/reasoner.py", "SEAKR/retriever.py", "SEAKR/utils.py"):
        (raw / "SeaKR" / name).write_text("# stand-in\n")
    src = raw / "DRAGIN" / "src"
    src.mkdir(parents=True)
    (src / "data.py").write_text(DRAGIN_DATA, encoding="utf-8")
    for name in ("main.py", "generate.py", "retriever.py", "eval.py"):
        (src / name).write_text("# stand-in\n")
    (raw / "DRAGIN" / "prep_elastic.py").write_text("# stand-in\n")


def write_models(models: Path) -> dict[str, Path]:
    """Random 4-layer LLaMAs in float16: the profile's model, one Table 4 backbone, Self-RAG."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from llama_tok import BOS, EOS, build_tokenizer
    from seakr_repro.llm.reflection_tokens import SCORED_TOKENS

    out = {}
    tok = build_tokenizer(models / "tok")
    for i, name in enumerate(("llama-2-7b-chat", "llama-2-7b", "selfrag-llama2-7b")):
        path = models / name
        tokenizer = AutoTokenizer.from_pretrained(models / "tok")
        if name.startswith("selfrag"):
            tokenizer.add_special_tokens({"additional_special_tokens": list(SCORED_TOKENS)})
        torch.manual_seed(i)
        cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                          num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=2,
                          max_position_embeddings=4096, bos_token_id=BOS, eos_token_id=EOS,
                          tie_word_embeddings=False, torch_dtype="float16",
                          # wide enough weights that the samples' hidden states spread: eigen U
                          # about -1.5, above the paper's delta -6, so SeaKR retrieves (the
                          # default 0.02 leaves every U at log(alpha) = -6.9: never a retrieval)
                          initializer_range=0.1)
        LlamaForCausalLM(cfg).to(torch.float16).save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
        out[name] = path
    del tok
    return out


def build_raw(root: Path) -> dict:
    """Everything under root; returns the paths the profile's settings name."""
    raw = root / "raw"
    raw.mkdir(parents=True)
    people = _people()
    write_tsv(raw / "psgs_w100.tsv", people)
    write_datasets(raw, people)
    write_clones(raw)
    models = write_models(root / "models")
    return {"raw": raw, "models": models, "tsv": raw / "psgs_w100.tsv",
            "seakr": raw / "SeaKR", "dragin": raw / "DRAGIN"}


def run_env(root: Path) -> dict:
    """The environment of a run on root's stand-ins: its data, cache and results folders under
    root (SEAKR_RAW_DIR and friends), no model from the user's settings or Hugging Face cache."""
    env = dict(os.environ)
    env.update({"SEAKR_RAW_DIR": str(root / "raw"), "SEAKR_CACHE_DIR": str(root / "cache"),
                "SEAKR_RESULTS_DIR": str(root / "results"), "SEAKR_FIGURES_DIR": str(root / "figures"),
                "SEAKR_TABLES_DIR": str(root / "tables"), "HF_HUB_OFFLINE": "1",
                "HF_HUB_CACHE": str(root / "empty-hub"), "SEAKR_MODEL_PATH": "",
                "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                "OMP_NUM_THREADS": "1"})
    env.pop("SEAKR_OVERRIDES", None)
    return env


def overrides(made: dict) -> list[str]:
    """Where the models are (a user names their own directories the same way) and the CPU; the
    corpus, the data sets and the clones sit at the profile's own places under SEAKR_RAW_DIR."""
    models = made["models"]
    sets = [f"model.path={models['llama-2-7b-chat']}", "model.device=cpu",
            "model.paths=" + json.dumps({"llama-2-7b": str(models["llama-2-7b"]),
                                          "selfrag-llama2-7b": str(models["selfrag-llama2-7b"])})]
    if "dragin_repo" in (load_config("base")["prompts"] or {}):     # issue 21's faithful baselines
        sets.append(f"prompts.dragin_repo={made['dragin']}")
    return [s for item in sets for s in ("--set", item)]


def cli(root: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seakr_repro", *args], cwd=REPO_ROOT, env=run_env(root),
                          capture_output=True, text=True, timeout=timeout)
