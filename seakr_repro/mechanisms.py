"""Experiments that measure SeaKR's mechanisms directly, with power even on a small model.

End-to-end accuracy differences between SeaKR and its ablations need thousands of questions to
resolve a few F1 points. These experiments measure U itself on questions whose gold passage is
known (the bundled sets name it), so every question is a paired trial:

- re-ranking (claim 3): U of the answer given the gold passage against U given each of BM25's top
  non-gold passages. How often does the lowest U pick the gold passage, against BM25's own order
  (its top hit is gold) and against chance (1 / N)?
- retrieval (claims 1, 4): every estimator on the same questions closed-book and with the gold
  passage in the context; the model is right far more often with the passage, so "this answer is
  wrong" has both classes and the AUROCs can be measured.

Both write one JSON line per question as they go (resumable), like every long step.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from .errors import UserError
from .io import iter_jsonl


def gold_passages(records: Sequence, searcher) -> list[tuple]:
    """(record, gold Hit) for the records whose first supporting passage is in the index."""
    out = []
    for record in records:
        for pid in record.supporting:
            hit = searcher.doc(pid)
            if hit is not None:
                out.append((record, hit))
                break
    if not out:
        raise UserError("no question names a supporting passage that the index holds",
                        setting="datasets", fix="use question sets with supporting passage ids "
                        "(the bundled sets) and the corpus they were written for")
    return out


def rerank_trial(record, gold, searcher, answer_u, n_candidates: int) -> dict:
    """One question: the gold passage and BM25's top (N-1) non-gold passages, each scored by
    `answer_u(question, passage_text) -> (output, U)`. Candidates keep BM25's order (the gold one
    at its BM25 rank, last when BM25 missed it) so that ties go as SeaKR's stable sort sends them."""
    golds = set(record.supporting)
    hits = searcher.search(record.question, k=n_candidates + len(golds))
    others = [h for h in hits if h.id not in golds][: n_candidates - 1]
    rank = next((i for i, h in enumerate(hits) if h.id in golds), None)
    cands = list(others)
    cands.insert(len(others) if rank is None else min(rank, len(others)), gold)
    scored = []
    for hit in cands:
        output, u = answer_u(record.question, hit.text)
        scored.append((u if output.strip() else math.inf, hit, output, u))
    best = min(scored, key=lambda t: t[0])
    return {"id": record.id, "n_candidates": len(cands), "gold_id": gold.id,
            "gold_bm25_rank": None if rank is None else rank + 1,
            "bm25_picks_gold": int(bool(hits) and hits[0].id in golds),
            "u_picks_gold": int(best[1].id == gold.id),
            "u_gold": scored[[c.id for c in cands].index(gold.id)][3],
            "candidates": [{"id": h.id, "gold": h.id == gold.id, "u": u, "output": o}
                           for _, h, o, u in scored]}


def run_rerank(pairs: Sequence[tuple], searcher, answer_u, n_candidates: int, out_path: str | Path,
               progress: bool = True) -> pd.DataFrame:
    """`rerank_trial` for every (record, gold) not yet in `out_path` (JSON lines, appended and
    flushed per question); returns the per-question table of every finished trial."""
    from tqdm.auto import tqdm

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    done = {row["id"] for _, row in iter_jsonl(out_path)} if out_path.is_file() else set()
    todo = [(r, g) for r, g in pairs if r.id not in done]
    with open(out_path, "a", encoding="utf-8") as fh:
        for record, gold in tqdm(todo, desc="re-ranking: gold vs BM25 passages", unit="q",
                                 disable=not progress, mininterval=2.0):
            row = rerank_trial(record, gold, searcher, answer_u, n_candidates)
            fh.write(json.dumps(row, ensure_ascii=False, default=float) + "\n")
            fh.flush()
    wanted = {r.id for r, _ in pairs}
    rows = [row for _, row in iter_jsonl(out_path) if row["id"] in wanted]
    return pd.DataFrame([{k: v for k, v in row.items() if k != "candidates"} for row in rows])


def rerank_summary(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Share of questions where each rule picks the gold passage, with bootstrap intervals."""
    from .evaluation.bootstrap import bootstrap_ci

    if df.empty:
        raise UserError("no re-ranking trials to summarise", fix="run the re-ranking experiment first")
    n_cand = int(df["n_candidates"].max())
    rules = {"lowest U (SeaKR)": df["u_picks_gold"], "BM25 top hit": df["bm25_picks_gold"]}
    rows = []
    for name, picks in rules.items():
        mean, low, high = bootstrap_ci(picks.astype(float), n_boot=n_boot, seed=seed)
        rows.append({"rule": name, "picks gold": mean, "low": low, "high": high, "n": len(df)})
    rows.append({"rule": f"chance (1/{n_cand})", "picks gold": 1 / n_cand, "low": None,
                 "high": None, "n": len(df)})
    return pd.DataFrame(rows)
