"""SKR's own results files as training input: labels from answers already generated.

THUNLP-MT/SKR ships its CoT answers of each training question closed-book in `cot_train.json` and
with retrieved passages in `cot_train_ir.json`: JSON lists, one object per question in the same
order, {"Question", "Gold answer": [...], "passages", "chain_of_thought_gpt3": <whole CoT output>}.
Its skr.py pairs them by position and labels each question from the exact match of the two outputs
(`labels.official_em`): "ir better" (our `unknown`), "ir worse" (`known`) or "same".
`labels_from_results` lets SKR-knn and SKR-cls learn from them (`skr.train_results`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...core.errors import UserError
from ...evaluation import exact_match, extract_answer
from .labels import ANSWER_DEFAULTS, LabelledQuestion, check_label_answer, label_from_scores, official_em

OUTPUT_KEY = "chain_of_thought_gpt3"       # the key skr.py and eval_skr.py read the output from
REQUIRED_KEYS = ("Question", "Gold answer", OUTPUT_KEY)
FIX = ("give the directory holding SKR's cot_train.json and cot_train_ir.json (JSON lists of "
       '{"Question", "Gold answer": [...], "chain_of_thought_gpt3"} in the same question order)')


def _bad(path: Path, what: str) -> UserError:
    return UserError(what, path=path, setting="skr.train_results", fix=FIX)


def results_paths(directory: str | Path, split: str = "train") -> tuple[Path, Path]:
    """The closed-book and the retrieval file of `split`, by SKR's names."""
    directory = Path(directory)
    return directory / f"cot_{split}.json", directory / f"cot_{split}_ir.json"


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """One results file, each entry checked for the keys skr.py reads."""
    path = Path(path)
    if not path.is_file():
        raise _bad(path, f"SKR results file {path} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _bad(path, f"SKR results file {path} is not JSON: {err}") from None
    if not isinstance(data, list) or not data:
        what = "an empty list" if data == [] else f"a JSON {type(data).__name__}"
        raise _bad(path, f"SKR results file {path} holds {what}, not a list of questions")
    for i, entry in enumerate(data):
        missing = [k for k in REQUIRED_KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise _bad(path, f"entry {i} of SKR results file {path} has no {', '.join(map(repr, missing))}")
        golds = entry["Gold answer"]
        if not (isinstance(golds, list) and golds and all(isinstance(g, str) for g in golds)):
            raise _bad(path, f"entry {i} of SKR results file {path}: 'Gold answer' is {golds!r}, not a "
                             "non-empty list of strings")
        if not isinstance(entry[OUTPUT_KEY], str) or not isinstance(entry["Question"], str):
            raise _bad(path, f"entry {i} of SKR results file {path}: 'Question' and '{OUTPUT_KEY}' must be strings")
    return data


def read_pair(directory: str | Path, split: str = "train") -> tuple[list[dict], list[dict]]:
    """Both files of `split`, checked to list the same questions in order (skr.py pairs by position)."""
    closed_path, ir_path = results_paths(directory, split)
    closed, ir = read_results(closed_path), read_results(ir_path)
    if len(closed) != len(ir):
        raise UserError(f"{closed_path} has {len(closed)} questions but {ir_path} has {len(ir)}",
                        path=ir_path, setting="skr.train_results",
                        fix="both files must answer the same questions in the same order")
    for i, (a, b) in enumerate(zip(closed, ir)):
        if a["Question"].strip() != b["Question"].strip():
            raise UserError(f"question {i} differs between {closed_path} ({a['Question']!r}) and "
                            f"{ir_path} ({b['Question']!r})", path=ir_path, setting="skr.train_results",
                            fix="both files must answer the same questions in the same order")
    return closed, ir


def labels_from_results(directory: str | Path, *, ties: str = "known", label_answer: str = "package",
                        split: str = "train", mode: str = ANSWER_DEFAULTS["mode"]) -> list[LabelledQuestion]:
    """Labels of every question of SKR's results files (ids: positions; question and golds: the
    closed-book file's, as skr.py). `mode`: the answer extraction of `label_answer="package"`."""
    check_label_answer(label_answer)
    closed, ir = read_pair(directory, split)
    out = []
    for i, (a, b) in enumerate(zip(closed, ir)):
        golds = a["Gold answer"]
        if label_answer == "official":
            s_closed, s_ir = official_em(a[OUTPUT_KEY], golds), official_em(b[OUTPUT_KEY], b["Gold answer"])
            ans_closed, ans_ir = a[OUTPUT_KEY], b[OUTPUT_KEY]
        else:
            ans_closed, ans_ir = (extract_answer(x[OUTPUT_KEY], mode) or "" for x in (a, b))
            s_closed, s_ir = exact_match(ans_closed, golds), exact_match(ans_ir, golds)
        out.append(LabelledQuestion(id=str(i), question=a["Question"], label=label_from_scores(s_closed, s_ir, ties),
                                    answer_closed=ans_closed, answer_retrieval=ans_ir, score_closed=s_closed,
                                    score_retrieval=s_ir))
    return out


def check_results_dir(directory: str | Path, split: str = "train") -> int:
    """The number of questions of a valid pair of results files (UserError naming the file else)."""
    return len(read_pair(directory, split)[0])
