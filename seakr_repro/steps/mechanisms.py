"""Experiments that measure SeaKR's mechanisms directly, with power even on a small model: U itself
on questions whose gold passage is known, each a paired trial (end-to-end F1 differences need
thousands of questions). Re-ranking (claim 3): U of the answer given the gold passage against U
given each of BM25's top non-gold ones: how often does the lowest U pick gold, against BM25's order
and chance (1 / N)? Retrieval (claims 1, 4): every estimator closed-book and with the gold passage,
so "this answer is wrong" has both classes and AUROCs can be measured. One batch of contexts per
question serves both (`trial`); each question is one JSON line, written as it finishes."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..artifacts import MECHANISMS
from ..core.errors import UserError
from ..core.io import appending, iter_jsonl


def load_pairs(dataset: str, n: int | None, seed: int, searcher) -> tuple[list[tuple], str | None]:
    """(record, gold Hit) pairs of a data set, or ([], why) when its file is not on disk: the
    experiments are then skipped (the ledger says so) rather than ending a long reproduce run."""
    from ..data.registry import load_dataset
    from ..core.errors import DataMissingError

    try:
        records = load_dataset(dataset, n=n, seed=seed)
    except DataMissingError as err:
        return [], str(err)
    return gold_passages(records, searcher), None


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


def candidates(record, gold, searcher, n_candidates: int) -> tuple[list, int | None]:
    """The gold passage and BM25's top (N-1) non-gold passages, in BM25's order (the gold one at
    its BM25 rank, last when BM25 missed it, so that ties go as SeaKR's stable sort sends them),
    and the gold passage's 0-based BM25 rank (None: not in BM25's top N + #golds)."""
    golds = set(record.supporting)
    hits = searcher.search(record.question, k=n_candidates + len(golds))
    others = [h for h in hits if h.id not in golds][: n_candidates - 1]
    rank = next((i for i, h in enumerate(hits) if h.id in golds), None)
    cands = list(others)
    cands.insert(len(others) if rank is None else min(rank, len(others)), gold)
    return cands, rank, bool(hits) and hits[0].id in golds


def trial(record, gold, searcher, backend, cfg, n_candidates: int, n_shot: int,
          ks: Sequence[int]) -> dict:
    """Both experiments on one question, from one batch of contexts: closed-book, and with each
    candidate passage (`candidates`). Every context gets a greedy answer and U (SeaKR's simple-QA
    prompt, its k samples at the configured layer and hook); the closed-book and gold contexts
    also get every estimator at every layer (`estimators.score_columns`)."""
    from .extraction import extract_contexts
    from .estimators import score_columns
    from ..llm.cache import with_call_counts

    cands, rank, bm25_gold = candidates(record, gold, searcher, n_candidates)
    at = [c.id for c in cands].index(gold.id)
    # the question's model calls go into its line, as a run's rows carry theirs (`price.work`)
    measured, calls = with_call_counts(backend, lambda: extract_contexts(
        backend, record, cfg, n_shot, [()] + [(h.text,) for h in cands],
        [True] + [i == at for i in range(len(cands))]))
    hook = cfg["uncertainty.hook"]
    retrieval = []
    for condition, (row, arrays) in (("closed-book", measured[0]), ("gold passage", measured[1 + at])):
        cols = score_columns(row, arrays[hook], cfg, ks)
        retrieval.append({"condition": condition, "answer": row["answer"], "f1": row["f1"],
                          "u": row["u"], **cols})
    scored = []                     # SeaKR's key: U, an empty greedy output ranks last
    for hit, (row, _) in zip(cands, measured[1:]):
        scored.append((row["u"] if row["greedy"].strip() else math.inf, hit, row))
    best = min(scored, key=lambda t: t[0])
    first = scored[0]               # BM25's order: its top candidate
    rerank = {"id": record.id, "n_candidates": len(cands), "gold_id": gold.id,
              "gold_bm25_rank": None if rank is None else rank + 1,
              "bm25_picks_gold": int(bm25_gold), "u_picks_gold": int(best[1].id == gold.id),
              "u_gold": measured[1 + at][0]["u"],
              "f1_lowest_u": best[2]["f1"], "f1_bm25_top": first[2]["f1"],
              "f1_gold": measured[1 + at][0]["f1"], "f1_closed_book": measured[0][0]["f1"],
              "candidates": [{"id": h.id, "gold": h.id == gold.id, "u": r["u"], "output": r["greedy"],
                              "answer": r["answer"], "f1": r["f1"]} for _, h, r in scored]}
    out = {"id": record.id, "rerank": rerank, "retrieval": retrieval}
    return {**out, "calls": calls} if calls is not None else out


def trial_on_worker(worker, model: str, record, gold, n_candidates: int, n_shot: int,
                    ks: Sequence[int]) -> dict:
    """`trial` on a Ray worker (`runs.ray_worker.Worker`): its searcher and backend of `model`."""
    return trial(record, gold, worker.searcher(), worker.backend(model), worker.cfg, n_candidates, n_shot, ks)


def run_mechanisms(pairs: Sequence[tuple], searcher, backend, cfg, out_dir: str | Path,
                   n_candidates: int, n_shot: int, ks: Sequence[int],
                   progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`trial` for every (record, gold) not yet in `out_dir/trials.jsonl` (one JSON line per
    question, appended and flushed as it finishes: a crash loses at most the current question;
    on Ray workers, when `backend` is a `fleet_backend.FleetBackend`, in the order they finish);
    returns (re-ranking table, retrieval scores table) of every finished trial of `pairs`."""
    from ..core.progress import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "trials.jsonl"
    done = {row["id"] for _, row in iter_jsonl(path)} if path.is_file() else set()
    todo = [(r, g) for r, g in pairs if r.id not in done]
    fleet = getattr(backend, "fleet", None)      # runner.engine: ray: the workers run the trials
    if fleet is not None:
        finished = fleet.map([(r.id, ("call", trial_on_worker, backend.model, r, g, n_candidates, n_shot,
                                        list(ks))) for r, g in todo])
    else:
        finished = ((r.id, trial(r, g, searcher, backend, cfg, n_candidates, n_shot, ks)) for r, g in todo)
    with appending(path) as append, \
            tqdm(total=len(todo), desc="mechanisms: closed-book, gold and BM25 passages", unit="q",
                 disable=not progress, mininterval=2.0) as bar:
        for _, row in finished:                 # this process alone writes, as they finish
            append(json.dumps(row, ensure_ascii=False, default=float) + "\n")
            bar.update(1)
    wanted = {r.id for r, _ in pairs}
    rows = [row for _, row in iter_jsonl(path) if row["id"] in wanted]
    rerank = pd.DataFrame([{k: v for k, v in row["rerank"].items() if k != "candidates"} for row in rows])
    retrieval = pd.DataFrame([{**x, "id": row["id"]} for row in rows for x in row["retrieval"]])
    return rerank, retrieval


def rerank_summary(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Share of questions where each rule picks the gold passage, with bootstrap intervals."""
    from ..evaluation.bootstrap import bootstrap_ci

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


def retrieval_summary(df: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """AUROC of every estimator for "this answer is wrong" on the closed-book and gold-passage
    answers pooled (and the share answered right in each condition), with bootstrap intervals."""
    from ..uncertainty.analysis import auroc_ci

    if df.empty:
        raise UserError("no retrieval trials to summarise", fix="run the mechanism experiment first")
    y = df["incorrect"].to_numpy(int)
    rows = []
    for col in ["eigen"] + [c for c in df.columns if c.startswith("est:")]:
        value, low, high = auroc_ci(df[col].to_numpy(float), y, n_boot=n_boot, seed=seed)
        rows.append({"estimator": "eigen (SeaKR)" if col == "eigen" else col[4:], "AUROC": value,
                     "low": low, "high": high, "n": len(df)})
    return pd.DataFrame(rows).sort_values("AUROC", ascending=False, ignore_index=True)


def plot_mechanisms(rerank: pd.DataFrame, retrieval: pd.DataFrame, model: str, dataset: str = ""):
    """Two panels: how often each rule picks the gold passage; each estimator's AUROC (bars from
    zero, chance marked)."""
    import matplotlib.pyplot as plt

    from ..reporting.figures import PALETTE, style

    picks, aurocs = rerank_summary(rerank), retrieval_summary(retrieval)
    with style():
        # constrained layout keeps the estimator names clear of the left panel
        fig, (a, b) = plt.subplots(1, 2, figsize=(9.0, 3.4), gridspec_kw={"width_ratios": [1, 1.4]},
                                   layout="constrained")
        colors = [PALETTE["blue"], PALETTE["orange"], PALETTE["black"]]
        for i, (_, r) in enumerate(picks.iterrows()):
            a.bar(i, 100 * r["picks gold"], color=colors[i % 3], alpha=0.85)
            if r["low"] is not None and not pd.isna(r["low"]):
                a.errorbar(i, 100 * r["picks gold"], yerr=[[100 * (r["picks gold"] - r["low"])],
                                                            [100 * (r["high"] - r["picks gold"])]],
                           color="black", capsize=3, linewidth=1)
            top = r["high"] if r["high"] is not None and not pd.isna(r["high"]) else r["picks gold"]
            a.text(i, 100 * top + 2, f"{100 * r['picks gold']:.0f}%", ha="center", fontsize=7)  # 0 shows
        a.set_xticks(range(len(picks)), [t.replace(" (SeaKR)", "\n(SeaKR)") for t in picks["rule"]])
        a.set_ylabel("picks the gold passage (%)")
        a.set_ylim(0, 100)
        a.set_title(f"Re-ranking, n = {len(rerank)}")
        y = np.arange(len(aurocs))[::-1]
        colors = [PALETTE["green"] if e.startswith("eigen") else PALETTE["sky"] for e in aurocs["estimator"]]
        a_err = np.array([aurocs["AUROC"] - aurocs["low"], aurocs["high"] - aurocs["AUROC"]])
        b.barh(y, aurocs["AUROC"], color=colors, xerr=np.nan_to_num(a_err), capsize=3)
        b.set_yticks(y, aurocs["estimator"])
        b.axvline(0.5, color=PALETTE["black"], linestyle="--", linewidth=1, label="chance")
        b.set_xlim(0.0, 1.0)
        b.set_xlabel('AUROC for "the answer is wrong"')
        b.set_title(f"Estimators, {len(retrieval)} answers (closed-book + gold passage)")
        b.legend(loc="lower right")
        on = f", {dataset}" + (" (a bundled look-alike set)" if dataset.startswith("bundled") else "") \
            if dataset else ""
        fig.suptitle(f"SeaKR's mechanisms measured directly on {model}{on}", fontsize=10)
    return fig


@dataclass
class MechanismsRun:
    dataset: str
    skipped: str | None                   # why nothing ran (the data set is not on disk), else None
    rerank: pd.DataFrame | None = None    # per question: U of each candidate, which one is gold
    retrieval: pd.DataFrame | None = None  # per (question, condition): every estimator, right or wrong
    picks: pd.DataFrame | None = None     # how often the lowest U / BM25's top hit is gold
    aurocs: pd.DataFrame | None = None    # each estimator's AUROC for "this answer is wrong"
    accuracy: pd.DataFrame | None = None  # F1 and share right, closed-book and with the gold passage
    figure: Any = None
    figure_files: tuple = ()              # the saved PNG and PDF (notebook 11 shows the PNG)


def run_step(cfg, dataset: str | None, n_questions: int | None, n_candidates: int, n_shot: int,
             ks: Sequence[int], progress: bool = True) -> MechanismsRun:
    """Notebook 11: both experiments on `dataset` (None: the profile's first single-hop set),
    saving rerank.csv, retrieval_scores.csv, summary.json and figures/<profile>/mechanisms.png
    (or skipped.json with the download instructions when the set is not on disk)."""
    from ..core.paths import FIGURES_DIR, results_dir
    from ..core.provenance import save_dataframe, save_json
    from ..reporting.figures import save_figure
    from ..runs.engine import close_backend, open_backend
    from ..runs.inputs import open_profile_searcher

    dataset = dataset or cfg["datasets.simple"][0]
    out = results_dir(cfg.profile) / MECHANISMS
    searcher = open_profile_searcher(cfg)
    pairs, skipped = load_pairs(dataset, n_questions, cfg["seed"], searcher)
    if skipped:   # the ledger then reports these claims from Table 3 alone
        save_json({"dataset": dataset, "skipped": skipped}, out / "skipped.json", cfg)
        return MechanismsRun(dataset, skipped)
    backend = open_backend(cfg)                  # here, or Ray workers (runner.engine)
    ks = [k for k in ks if k <= cfg["uncertainty.k"]]
    if progress:
        print(f"{backend.name}: {len(pairs)} questions of {dataset} with their gold passage in the index, "
              f"{n_candidates} candidate passages each, k = {cfg['uncertainty.k']}")
    try:
        rerank, retrieval = run_mechanisms(pairs, searcher, backend, cfg, out, n_candidates, n_shot, ks,
                                           progress)
    finally:
        close_backend(backend)                   # the model (or the workers) is not needed below
    save_dataframe(rerank, out / "rerank.csv", cfg, dataset=dataset, n_candidates=n_candidates, n_shot=n_shot)
    save_dataframe(retrieval, out / "retrieval_scores.csv", cfg, dataset=dataset, n_shot=n_shot)
    boot = dict(n_boot=cfg["evaluation.bootstrap_samples"], seed=cfg["seed"])
    picks, aurocs = rerank_summary(rerank, **boot), retrieval_summary(retrieval, **boot)
    by = retrieval.groupby("condition")
    accuracy = by[["f1"]].mean().assign(right=by["incorrect"].apply(lambda s: 1 - s.mean()), n=by.size())
    save_json({"dataset": dataset, "n_questions": len(rerank), "picks_gold": picks.to_dict("records"),
               "auroc": aurocs.to_dict("records"), "accuracy": accuracy.reset_index().to_dict("records")},
              out / "summary.json", cfg)
    figure = plot_mechanisms(rerank, retrieval, backend.name, dataset)
    files = tuple(save_figure(figure, "mechanisms", FIGURES_DIR / cfg.profile).values())
    return MechanismsRun(dataset, None, rerank, retrieval, picks, aurocs, accuracy, figure, files)
