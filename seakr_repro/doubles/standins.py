"""Stand-ins, in the official formats, for what the paper profile reads besides the corpus: the
SeaKR and DRAGIN clones' demonstration files and DPR's top-10 files (synthetic text of the real
lengths). The scale check, the card check and the tests drive the paper profile's own code
with them."""
from __future__ import annotations

import json
from pathlib import Path

# entries of each `examples` list in the official SEAKR/dataset.py (counted in THU-KEG/SeaKR), and
# their typical shape there: a question of ~75 characters, 3 reasoning steps of ~50, a short answer
OFFICIAL_EXAMPLES = {"2wiki": 10, "hotpotqa": 20, "iirc": 20, "simple": 29}
# the lengths of the `examplars` lists in DRAGIN's src/data.py (its faithful baselines' demos)
DRAGIN_EXAMPLES = {"WikiMultiHopQA": 8, "HotpotQA": 11, "IIRC": 20, "StrategyQA": 6}


def write_standins(raw: Path, questions: int) -> Path:
    """Under `raw` (the child's SEAKR_RAW_DIR), what the paper profile reads besides the corpus, in
    the official formats: a SeaKR clone's SEAKR/dataset.py whose classes hold `examples` lists of
    the official lengths (synthetic text), a DRAGIN clone's src/data.py likewise (`examplars` and
    one-line template lambdas, as the faithful baselines read them), and DPR top-10 files (a JSON
    list of {question, answers, ctxs}) for the synthetic simple-QA questions. Returns the SeaKR
    clone's directory."""
    from ..data.registry import DATASETS, TOP_PASSAGES, top_passages_path
    from ..llm.synthetic import synthetic_passages, synthetic_question, synthetic_word
    from ..prompts.dragin import DATA_FILE as DRAGIN_DATA_FILE
    from ..prompts.official import CLASSES, DATASET_FILE

    def words(seed: int, n: int) -> str:
        return " ".join(synthetic_word((seed * 31 + j * 7) % 3000) for j in range(n))

    repo = raw / "SeaKR"
    (repo / DATASET_FILE).parent.mkdir(parents=True, exist_ok=True)
    classes = []
    for family, cls in CLASSES.items():
        examples = [{"question": words(i, 12).capitalize() + "?",
                     "cot": [words(i + s, 8).capitalize() + "." for s in range(3)],
                     "answer": words(i, 2).title()} for i in range(OFFICIAL_EXAMPLES[family])]
        classes.append(f"class {cls}:\n    examples = {examples!r}\n")
    (repo / DATASET_FILE).write_text("\n\n".join(classes), encoding="utf-8")
    dragin = raw / "DRAGIN" / DRAGIN_DATA_FILE
    dragin.parent.mkdir(parents=True, exist_ok=True)
    template = "lambda self, ques: f'Question: {ques}\\nAnswer:'"
    dragin.write_text("\n\n".join(
        f"class {cls}:\n    examplars = " + repr([{"question": words(i, 12).capitalize() + "?",
                                                  "cot": " ".join(words(i + s, 8).capitalize() + "." for s in range(3)),
                                                  "answer": words(i, 2).title()} for i in range(n)])
        + f"\n    demo_input_template = test_input_template = {template}"
        + "\n    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'\n"
        for cls, n in DRAGIN_EXAMPLES.items()), encoding="utf-8")
    ctxs = [{"id": p["id"], "title": p["title"], "text": p["text"]} for p in synthetic_passages(10)]
    for name in TOP_PASSAGES:
        if name not in DATASETS:
            continue
        path = top_passages_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        qs = [synthetic_question(name, i) for i in range(questions)]
        path.write_text(json.dumps([{"question": q["question"], "answers": q["answers"], "ctxs": ctxs}
                                    for q in qs]), encoding="utf-8")
    return repo
