"""The paper's claims as a ledger: for each claim, the paper's evidence, our paired measurement on
the profile's own runs (a difference on the same questions with a bootstrap interval), and a
verdict.

Verdicts are mechanical, so nothing is tuned until it holds:
- holds: the interval lies on the claimed side of the margin (zero unless the claim is one of
  non-inferiority, "costs little or nothing");
- does not hold: the interval lies on the other side;
- inconclusive: the interval straddles it, or fewer than `MIN_N` paired questions were measured. The
  ledger then gives the number of questions that would decide it at the observed effect (the
  interval's half-width shrinks as 1/sqrt(n)).
A claim measured in several ways (one baseline each, say) holds only if every part holds, does not
hold if any part does not, and is inconclusive otherwise."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..artifacts import CALIBRATION, MECHANISMS, table
from ..core.errors import UserError
from ..evaluation.bootstrap import paired_bootstrap

MIN_N = 20          # fewer paired questions than this decide nothing
HOLDS, FAILS, OPEN = "holds", "does not hold", "inconclusive"


@dataclass(frozen=True)
class Claim:
    id: int
    short: str
    statement: str
    evidence: str        # where the paper shows it, with its numbers where they are tabulated
    measure: Callable[["_Saved"], list["Measurement"]]   # its parts, from a profile's saved results
    missing: str         # what the ledger says when no saved result measures it


@dataclass
class Measurement:
    """One paired comparison for one claim: diff = mean(a) - mean(b) over the same questions."""

    claim: int
    what: str            # e.g. "SeaKR - DRAGIN, F1, multi-hop (pooled)"
    unit: str            # "F1 points", "AUROC", "share of questions", "s/question"
    diff: float
    low: float
    high: float
    n: int
    direction: int = 1   # +1: the claim says diff > margin; -1: diff < -margin (cost)
    margin: float = 0.0  # non-inferiority: the claim holds if diff > -margin (direction +1)
    source: str = ""     # which of our artifacts it comes from
    paper: str = ""      # the paper's corresponding number(s)

    @property
    def verdict(self) -> str:
        if self.n < MIN_N or any(math.isnan(x) for x in (self.diff, self.low, self.high)):
            return OPEN
        # orient so that "claimed" is positive, then compare with the (non-inferiority) bound
        lo, hi = sorted((self.direction * self.low, self.direction * self.high))
        bound = -self.margin
        if lo > bound:
            return HOLDS
        if hi < bound:
            return FAILS
        return OPEN

    @property
    def n_to_decide(self) -> int | None:
        """Paired questions at which the interval would exclude the bound at the observed effect
        (None when decided already or when there is no effect to detect)."""
        if self.verdict != OPEN or any(math.isnan(x) for x in (self.diff, self.low, self.high)):
            return None
        effect = abs(self.direction * self.diff + self.margin)
        half = (self.high - self.low) / 2
        if effect <= 1e-12 or half <= 0:
            return None
        return max(MIN_N, int(math.ceil(self.n * (half / effect) ** 2)))


def paired(what: str, claim: int, a: Sequence[float], b: Sequence[float], unit: str, *,
           scale: float = 1.0, direction: int = 1, margin: float = 0.0, source: str = "",
           paper: str = "", n_boot: int = 1000, seed: int = 0,
           confidence: float = 0.95) -> Measurement:
    """A Measurement from per-question values of a and b (same questions, same order)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = paired_bootstrap(a, b, n_boot=n_boot, confidence=confidence, seed=seed) if a.size >= 2 else None
    diff, low, high = (math.nan,) * 3 if d is None else (d.diff * scale, d.low * scale, d.high * scale)
    return Measurement(claim, what, unit, diff, low, high, int(a.size), direction, margin, source, paper)


def paired_statistic(what: str, claim: int, stat: Callable[[np.ndarray], float], n: int, unit: str,
                     *, direction: int = 1, margin: float = 0.0, source: str = "", paper: str = "",
                     n_boot: int = 1000, seed: int = 0, confidence: float = 0.95) -> Measurement:
    """A Measurement of a statistic of n questions that is not a mean (an AUROC difference, say):
    `stat(idx)` computes it on the questions `idx`; questions are resampled with replacement."""
    full = low = high = math.nan
    if n >= 2:
        rng = np.random.default_rng(seed)
        full = float(stat(np.arange(n)))
        boots = np.array([stat(rng.integers(0, n, n)) for _ in range(n_boot)], dtype=float)
        boots = boots[np.isfinite(boots)]
        if boots.size >= max(10, n_boot // 2):   # else too many resamples with one class only
            tail = (1 - confidence) / 2
            low, high = (float(q) for q in np.quantile(boots, [tail, 1 - tail]))
    return Measurement(claim, what, unit, full, low, high, n, direction, margin, source, paper)


def auroc_difference(scores_a: Sequence[float], scores_b: Sequence[float], incorrect: Sequence[int],
                     **kwargs) -> Callable[[np.ndarray], float]:
    """stat(idx) = AUROC(a) - AUROC(b) for "this answer is wrong" on the questions idx (NaN when
    the resample has one class only)."""
    from ..uncertainty.analysis import auroc

    a, b, y = (np.asarray(x, float) for x in (scores_a, scores_b, incorrect))
    if not (a.size == b.size == y.size):
        raise UserError(f"{a.size}, {b.size} and {y.size} scores/labels: they must be paired",
                        fix="score every question with both estimators")
    return lambda idx: auroc(a[idx], y[idx]) - auroc(b[idx], y[idx])


def verdict_of(parts: Sequence[Measurement]) -> str:
    """A claim's verdict from its parts: all hold -> holds; any fails -> does not hold."""
    if not parts:
        return OPEN
    verdicts = [m.verdict for m in parts]
    if FAILS in verdicts:
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else OPEN


def ledger_frame(measurements: Sequence[Measurement], missing: Mapping[int, str] | None = None,
                 decimals: int = 3) -> pd.DataFrame:
    """One row per measurement (grouped under its claim, claims in order), plus a row for each
    claim with no measurement that says why. Columns are what the Markdown/LaTeX tables show."""
    missing = dict(missing or {})
    rows = []
    for claim in CLAIMS:
        parts = [m for m in measurements if m.claim == claim.id]
        overall = verdict_of(parts)
        head = {"claim": claim.id, "short": claim.short, "statement": claim.statement}
        if not parts:
            rows.append({**head, "paper evidence": claim.evidence, "measurement": "not measured",
                         "diff": math.nan, "low": math.nan, "high": math.nan, "unit": "", "n": 0,
                         "verdict": OPEN, "n to decide": None, "claim verdict": OPEN,
                         "source": missing.get(claim.id, "no artifact of this profile measures it")})
            continue
        for m in parts:
            rows.append({**head, "paper evidence": (claim.evidence + (f": {m.paper}" if m.paper else "")),
                         "measurement": m.what, "diff": round(m.diff, decimals),
                         "low": round(m.low, decimals), "high": round(m.high, decimals),
                         "unit": m.unit, "n": m.n, "verdict": m.verdict,
                         "n to decide": m.n_to_decide, "claim verdict": overall,
                         "source": m.source})
    return pd.DataFrame(rows)


def _interval(row) -> str:
    if pd.isna(row["diff"]):
        return "–"
    lo = "–" if pd.isna(row["low"]) else f"{row['low']:+.3g}"
    hi = "–" if pd.isna(row["high"]) else f"{row['high']:+.3g}"
    return f"{row['diff']:+.3g} [{lo}, {hi}] {row['unit']}".strip()


def _verdict_text(row) -> str:
    text = row["verdict"]
    if text == OPEN and row["n"] and row["n"] < MIN_N:
        text += f" (n < {MIN_N})"
    elif text == OPEN and row["n to decide"] and not pd.isna(row["n to decide"]):
        text += f" (n ≈ {int(row['n to decide']):,} would decide)"
    return text


def ledger_markdown(df: pd.DataFrame, title: str, note: str = "") -> str:
    """The ledger as GitHub Markdown: one block per claim, its parts as table rows."""
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = [f"**{esc(title)}**", ""]
    if note:
        lines += [note, ""]
    lines += ["| # | claim | paper | our measurement | diff [95% CI] | n | verdict |",
              "|---|---|---|---|---|---:|---|"]
    for claim_id, group in df.groupby("claim", sort=False):
        for i, (_, row) in enumerate(group.iterrows()):
            head = (f"{claim_id} | **{esc(row['short'])}** ({esc(row['claim verdict'])}): "
                    f"{esc(row['statement'])}") if i == 0 else " | "
            lines.append(f"| {head} | {esc(row['paper evidence'])} | {esc(row['measurement'])} | "
                         f"{esc(_interval(row))} | {row['n']} | {esc(_verdict_text(row))} |")
    lines += ["", "Verdicts: holds = the 95% paired bootstrap interval lies on the claimed side; "
                  "does not hold = on the other side; inconclusive = it straddles it, or fewer than "
                  f"{MIN_N} paired questions (with the number that would decide it at the "
                  "observed effect)."]
    return "\n".join(lines) + "\n"


def ledger_latex(df: pd.DataFrame, title: str, note: str = "") -> str:
    """The ledger as a booktabs longtable-free table (one line per measurement)."""
    from ..reporting.tables import latex_escape

    lines = [r"\begin{table}[t]", r"\centering", r"\footnotesize",
             r"\begin{tabular}{r p{3.2cm} p{4.2cm} l r l}", r"\toprule",
             r"\# & claim & our measurement & diff [95\% CI] & $n$ & verdict \\", r"\midrule"]
    for claim_id, group in df.groupby("claim", sort=False):
        for i, (_, row) in enumerate(group.iterrows()):
            first = i == 0
            lines.append(" & ".join([
                str(claim_id) if first else "",
                latex_escape(f"{row['short']} ({row['claim verdict']})") if first else "",
                latex_escape(row["measurement"]), latex_escape(_interval(row)), str(row["n"]),
                latex_escape(_verdict_text(row))]) + r" \\")
        lines.append(r"\midrule")
    lines[-1] = r"\bottomrule"
    caption = f"{title}. {note}" if note else title
    lines += [r"\end{tabular}", rf"\caption{{{latex_escape(caption)}}}", r"\label{tab:claims}",
              r"\end{table}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- from saved artifacts
# Which of our runs answer each claim (labels as in experiments' RunSpecs / ABLATIONS).
BASELINES_COMPLEX = ("cot", "ircot", "flare", "dragin")
BASELINES_SIMPLE = ("cot", "flare", "dragin")
NONINFERIORITY_F1 = 2.0   # claim 4's "little or nothing": within 2 F1 points of always retrieving
# The saved results files measure_claims reads (their provenance says where they were computed).
SCORES = f"{CALIBRATION}/question_scores.csv"
COMPLEX, SIMPLE, ABLATED, TIMED = (f"{table(k).step}/results.csv" for k in ("table1", "table2", "table3", "table7"))
INPUTS = (SCORES, f"{MECHANISMS}/retrieval_scores.csv", f"{MECHANISMS}/rerank.csv", COMPLEX, SIMPLE, ABLATED, TIMED)


def _runs(res_dir, csv: str) -> dict[str, dict[str, list[dict]]]:
    """{method label: {dataset: per-question rows}} of one results CSV (its `run_file` column)."""
    from ..runs.runner import read_results

    path = res_dir / csv
    if not path.is_file():
        return {}
    df = pd.read_csv(path)
    if "run_file" not in df.columns:
        return {}
    out: dict[str, dict[str, list[dict]]] = {}
    for (method, dataset), group in df.groupby(["method", "dataset"], sort=False):
        run_file = res_dir / str(group["run_file"].iloc[0])
        out.setdefault(str(method), {})[str(dataset)] = read_results(run_file)
    return out


def _pair(a: Mapping[str, list[dict]], b: Mapping[str, list[dict]], value) -> tuple[list, list]:
    """Per-question values of two runs on the questions both finished, pooled over data sets."""
    xs, ys = [], []
    for dataset in a:
        if dataset not in b:
            continue
        other = {r["id"]: r for r in b[dataset]}
        for row in a[dataset]:
            if row["id"] in other:
                xs.append(value(row))
                ys.append(value(other[row["id"]]))
    return xs, ys


def _f1(row) -> float:
    return 100.0 * float(row["f1"])


def _paper_f1(table: str, a: str, b: str, datasets: Sequence[str] | None = None) -> str:
    """'SeaKR 36.0 vs DRAGIN 30.0 F1 (mean of 2wiki, hotpotqa, iirc)' from data/paper/."""
    from ..reporting.paper_numbers import canonical, load_paper_table

    try:
        df = load_paper_table(table)
    except UserError:
        return ""
    df = df[df["metric"].map(canonical) == "f1"]
    if datasets:
        df = df[df["dataset"].map(canonical).isin([canonical(d) for d in datasets])]
    means = {}
    for name in (a, b):
        vals = df[df["method"].map(canonical) == canonical(name)]["value"].dropna()
        if vals.empty:
            return ""
        means[name] = (vals.mean(), sorted(df[df["method"].map(canonical) == canonical(name)]["dataset"]))
    sets = ", ".join(means[a][1])
    return f"{a} {means[a][0]:.1f} vs {b} {means[b][0]:.1f} F1 (mean over {sets})"


class _Saved:
    """A profile's saved results as the claims read them: the folder, the bootstrap's settings, and
    each results CSV's runs, read once."""

    def __init__(self, cfg, res, n_boot: int | None):
        self.cfg, self.res, self._runs = cfg, res, {}
        self.boot = {"n_boot": int(n_boot or cfg["evaluation.bootstrap_samples"]),
                     "seed": int(cfg["seed"]), "confidence": float(cfg["evaluation.confidence"])}

    def runs(self, csv: str) -> dict[str, dict[str, list[dict]]]:
        if csv not in self._runs:
            self._runs[csv] = _runs(self.res, csv)
        return self._runs[csv]

    def csv(self, name: str) -> pd.DataFrame | None:
        return pd.read_csv(self.res / name) if (self.res / name).is_file() else None

    def score_files(self):
        """(file, what it scored, its per-question scores) of step 03 and of the retrieval mechanism run."""
        for file, label in ((SCORES, "calibration set, closed-book"),
                            (f"{MECHANISMS}/retrieval_scores.csv",
                             "bundled single-hop, closed-book + gold passage")):
            scores = self.csv(file)
            if scores is not None:
                yield file, label, scores

    def auroc(self, what: str, claim: int, scores: pd.DataFrame, a: str, b: str, file: str) -> Measurement:
        """AUROC of column a minus AUROC of column b for a wrong answer."""
        return paired_statistic(what, claim, auroc_difference(scores[a], scores[b], scores["incorrect"].to_numpy(int)),
                                len(scores), "AUROC", source=file, **self.boot)

    def versus_seakr(self, ablation: str, value=_f1) -> tuple[list, list] | None:
        """Per-question values of full SeaKR and of one of its ablations (notebook 06), if both ran."""
        runs = self.runs(ABLATED)
        return _pair(runs["seakr"], runs[ablation], value) if runs.get("seakr") and ablation in runs else None


def _estimator(s: _Saved) -> list[Measurement]:
    return [s.auroc(f"AUROC(eigen) - AUROC({other[4:]}) for a wrong answer ({label})", 1, scores,
                    "eigen", other, file)
            for file, label, scores in s.score_files() for other in scores.columns if other.startswith("est:")]


def _layer_and_k(s: _Saved) -> list[Measurement]:
    out = []
    for file, label, scores in s.score_files():
        layers = sorted(int(c[6:]) for c in scores.columns if c.startswith("layer:"))
        mid = int(scores["middle_layer"].iloc[0]) if "middle_layer" in scores.columns else None
        if mid in layers:
            out += [s.auroc(f"AUROC(layer {mid}) - AUROC(layer {other}) ({label})", 2, scores,
                            f"layer:{mid}", f"layer:{other}", file)
                    for other in sorted({layers[0], layers[-1]} - {mid})]
        ks = sorted(int(c[2:]) for c in scores.columns if c.startswith("k:"))
        if len(ks) >= 2:
            out.append(s.auroc(f"AUROC(k={ks[-1]}) - AUROC(k={ks[0]}) ({label})", 2, scores,
                               f"k:{ks[-1]}", f"k:{ks[0]}", file))
    return out


def _reranking(s: _Saved) -> list[Measurement]:
    """The mechanism first (the gold passage's U against BM25's order), then end to end."""
    out = []
    src = f"{MECHANISMS}/rerank.csv"
    df = s.csv(src)
    if df is not None:
        n_cand = int(df["n_candidates"].iloc[0]) if len(df) else 0
        out.append(paired("lowest U picks the gold passage - BM25's top hit is gold", 3,
                          df["u_picks_gold"], df["bm25_picks_gold"], "share of questions",
                          source=src, **s.boot))
        out.append(paired(f"lowest U picks the gold passage - chance (1/{n_cand})", 3,
                          df["u_picks_gold"], np.full(len(df), 1.0 / max(n_cand, 1)),
                          "share of questions", source=src, **s.boot))
        out.append(paired(f"answer F1 with the lowest-U passage - with BM25's top passage "
                          f"({n_cand} candidates)", 3, 100 * df["f1_lowest_u"],
                          100 * df["f1_bm25_top"], "F1 points", source=src, **s.boot))
    if (pair := s.versus_seakr("no-sa-rerank")) is not None:
        out.append(paired("SeaKR - SeaKR without re-ranking (BM25 top-1), F1", 3, *pair, "F1 points",
                          source=table("table3").step, paper=_paper_f1("seakr_table3", "seakr", "no-sa-rerank"),
                          **s.boot))
    return out


def _selective_retrieval(s: _Saved) -> list[Measurement]:
    """Accuracy within the margin of always retrieving, with fewer retrievals. The mechanism first:
    on the bundled questions, keep the closed-book answer when its U <= delta, else answer with the
    gold passage (an oracle retriever), against always using the passage."""
    out = []
    src = f"{MECHANISMS}/retrieval_scores.csv"
    sc = s.csv(src)
    if sc is not None:
        from ..uncertainty.thresholds import read_deltas

        closed = sc[sc["condition"] == "closed-book"].set_index("id")
        gold = sc[sc["condition"] == "gold passage"].set_index("id").reindex(closed.index)
        delta = float(read_deltas(s.cfg, s.res)["eigen"])
        retrieve = closed["u"] > delta
        selective = np.where(retrieve, gold["f1"], closed["f1"])
        out.append(paired(f"U-gated (retrieve when U > {delta:.3g}: on {retrieve.mean():.0%} of the "
                          "questions) - always retrieve, F1, gold passage as the retrieval "
                          f"(non-inferiority, margin {NONINFERIORITY_F1:g})",
                          4, 100 * selective, 100 * gold["f1"], "F1 points",
                          margin=NONINFERIORITY_F1, source=src, **s.boot))
        out.append(paired("U-gated - always retrieve, retrievals per question (gold passage)", 4,
                          retrieve.astype(float), np.ones(len(closed)), "retrievals", direction=-1,
                          source=src, **s.boot))
    if (pair := s.versus_seakr("no-sa-retrieval")) is not None:
        out.append(paired("SeaKR - always retrieve, F1 (non-inferiority, margin "
                          f"{NONINFERIORITY_F1:g})", 4, *pair, "F1 points", margin=NONINFERIORITY_F1,
                          source=table("table3").step,
                          paper=_paper_f1("seakr_table3", "seakr", "no-sa-retrieval"), **s.boot))
        out.append(paired("SeaKR - always retrieve, retrievals per question", 4,
                          *s.versus_seakr("no-sa-retrieval", lambda r: float(r["n_retrievals"])),
                          "retrievals", direction=-1, source=table("table3").step, **s.boot))
    return out


def _self_aware_reasoning(s: _Saved) -> list[Measurement]:
    """From SeaKR's own rows: both paths are recorded on every question."""
    from ..evaluation import f1_score

    seakr_rows = s.runs(COMPLEX).get("seakr") or s.runs(ABLATED).get("seakr")
    if not seakr_rows:
        return []
    rows = [r for dataset_rows in seakr_rows.values() for r in dataset_rows]
    return [paired(f"SeaKR's choice - {name} alone, F1", 5, [_f1(r) for r in rows],
                   [100.0 * f1_score((r.get("extra") or {}).get(key) or "", r["golds"]) for r in rows],
                   "F1 points", source=f"{table('table1').step} (SeaKR rows)",
                   paper=_paper_f1("seakr_table3", "seakr", ablation), **s.boot)
            for key, name, ablation in (("rationale_answer", "rationale path", "rationales-only"),
                                        ("knowledge_answer", "knowledge path", "knowledge-only"))]


def _accuracy(s: _Saved) -> list[Measurement]:
    """SeaKR against each baseline, pooled over the data sets of Table 1 and of Table 2."""
    out = []
    for csv, baselines, hops, paper_table in (
            (COMPLEX, BASELINES_COMPLEX, "multi-hop", "seakr_table1"),
            (SIMPLE, BASELINES_SIMPLE, "single-hop", "seakr_table2")):
        runs = s.runs(csv)
        out += [paired(f"SeaKR - {base}, F1, {hops} (pooled)", 6, *_pair(runs["seakr"], runs[base], _f1),
                       "F1 points", source=csv.split("/")[0], paper=_paper_f1(paper_table, "seakr", base),
                       **s.boot)
                for base in baselines if "seakr" in runs and base in runs]
    return out


def _cost(s: _Saved) -> list[Measurement]:
    """From the timed runs of notebook 09 (call cache off)."""
    timed = s.runs(TIMED)
    return [paired(f"SeaKR - {base}, seconds per question", 7,
                   *_pair(timed["seakr"], timed[base], lambda r: float(r["seconds"])), "s/question",
                   direction=-1, source=table("table7").step, **s.boot)
            for base in ("flare", "dragin") if "seakr" in timed and base in timed]


_NEITHER_RUN = "neither the mechanism run (notebook 11) nor the ablation runs (notebook 06) were found"
CLAIMS: tuple[Claim, ...] = (
    Claim(1, "estimator", "The Gram log-determinant of forced-EOS vectors separates wrong from right "
          "answers better than perplexity, LN-entropy, energy and prompting.",
          "Table 3 (estimator rows), Figure 3", _estimator,
          "per-question estimator scores not found (run notebook 03)"),
    Claim(2, "layer and k", "Middle layers give the best estimator; its quality rises with k and "
          "saturates.", "Figure 3 (quality vs layer, vs k)", _layer_and_k,
          "per-question scores by layer and k not found (run notebook 03)"),
    Claim(3, "re-ranking", "Choosing the candidate passage with the lowest U gives better answers "
          "than BM25's order.", "Table 3, row - re-rank", _reranking, _NEITHER_RUN),
    Claim(4, "selective retrieval", "Retrieving only when U > delta costs little or nothing "
          "against always retrieving, while retrieving less often.", "Table 3, row - retrieval",
          _selective_retrieval, _NEITHER_RUN),
    Claim(5, "self-aware reasoning", "Choosing between the rationale path and the knowledge path "
          "by U beats either path alone.", "Table 3, rows rationales-only / knowledge-only",
          _self_aware_reasoning, "no SeaKR run on multi-hop QA was found (run notebook 04)"),
    Claim(6, "accuracy", "SeaKR beats CoT, IRCoT, FLARE and DRAGIN on multi-hop QA (Table 1) and "
          "single-hop QA (Table 2).", "Tables 1 and 2", _accuracy,
          "no SeaKR and baseline runs of notebooks 04/05 were found"),
    Claim(7, "cost", "SeaKR costs less per question than FLARE and DRAGIN.", "Table 7", _cost,
          "no timed SeaKR and FLARE/DRAGIN runs of notebook 09 were found"),
)


def measure_claims(cfg, n_boot: int | None = None, res=None) -> tuple[list[Measurement], dict[int, str]]:
    """Every measurement this profile's saved results allow (those under `res`, default
    results/<profile>/), and why the others are missing."""
    from pathlib import Path

    from ..core.paths import results_dir

    saved = _Saved(cfg, Path(res) if res is not None else results_dir(cfg.profile), n_boot)
    out: list[Measurement] = []
    missing: dict[int, str] = {}
    for claim in CLAIMS:
        parts = claim.measure(saved)
        out += parts
        if not parts:
            missing[claim.id] = claim.missing
    return out, missing


def render_ledger(cfg, out_dir=None, n_boot: int | None = None) -> pd.DataFrame | None:
    """Measure every claim and write claims.md, claims.csv and claims.tex under tables/<profile>/.
    With nothing measured (no results yet: a fresh clone) nothing is written and None is
    returned, so a ledger rendered from a real run is never replaced by an empty one."""
    from ..core.device import compute_note
    from ..core.io import atomic_open
    from ..core.paths import TABLES_DIR, results_dir
    from ..core.provenance import read_compute, save_dataframe

    measurements, missing = measure_claims(cfg, n_boot)
    if not measurements:
        return None
    df = ledger_frame(measurements, missing)
    directory = out_dir or TABLES_DIR / cfg.profile
    title = (f"The paper's claims on the {cfg.profile} profile ({cfg['model.name']}): paired "
             "differences on the same questions, 95% bootstrap intervals")
    res = results_dir(cfg.profile)
    inputs = {name: read_compute(res / name) for name in INPUTS if (res / name).is_file()}
    note = compute_note(inputs.values())
    save_dataframe(df, directory / "claims.csv", cfg, inputs_compute=inputs)
    with atomic_open(directory / "claims.md") as fh:
        fh.write(ledger_markdown(df, title, note))
    with atomic_open(directory / "claims.tex") as fh:
        fh.write(ledger_latex(df, title, note))
    return df
