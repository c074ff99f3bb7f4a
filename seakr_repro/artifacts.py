"""What this package runs and reproduces, declared once (docs/extending.md): each method (its
class, the tables it is a row of, its disk figures); for each paper table its rows, its data sets,
the step that computes it, the paper's CSV, caption and the figure drawn from it; for Figure 3 its
panels and their markers; each step's reads and writes.

`steps.tables.run_table(key, cfg)` runs a table's step, `render.beside_paper(key, cfg)` shows it
beside the paper, and `render.render_all` / `render.draw_figure` render every artifact from these
declarations (notebooks 04-07, 09 and 90 call only those; 03 shows `render.figure`, unsaved). Nothing here computes or
imports a step, so every step can read it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunSpec:
    label: str                      # row name in the tables
    method: str                     # key of METHODS
    overrides: dict = field(default_factory=dict)
    model: str | None = None        # another backbone (Table 4) or the Self-RAG checkpoint


# The QA methods: the tables take their rows from `tables` ("seed": notebook 10's), in this order
# (the paper's); `runs.disk_needs` sizes their runs by the bytes per question `make scale-check`
# MEASURED (docs/disk-and-memory.md), which a method in a paper table must carry.
@dataclass(frozen=True)
class MethodSpec:
    name: str
    cls: str                        # "module:Class", imported when the method is built
    tables: tuple = ()
    cache_bytes: int | None = None  # LLM call cache per question
    run_bytes: int | None = None    # run file per question
    model: str | None = None        # its own checkpoint (model.paths) in place of the profile's model
    aliases: tuple = ()


SELF_RAG_MODEL = "selfrag-llama2-7b"   # Self-RAG runs its own fine-tuned checkpoint (model.paths)
_M = "seakr_repro.methods."
_SKR = tuple(MethodSpec(f"skr-{v}", f"{_M}skr.method:SKR{v.capitalize()}", ("seed",))
             for v in ("prompt", "icl", "cls", "knn"))

METHODS: dict[str, MethodSpec] = {m.name: m for m in (
    MethodSpec("cot", f"{_M}cot:CoT", ("table1", "table2", "table7"), 1_179, 800),
    MethodSpec("ircot", f"{_M}ircot:IRCoT", ("table1", "table7"), 6_137, 5_886),
    MethodSpec("self_rag", f"{_M}self_rag:SelfRAG", ("table1", "table2"), 10_912, 3_974,
               model=SELF_RAG_MODEL, aliases=("self-rag", "selfrag")),
    MethodSpec("flare", f"{_M}flare:FLARE", ("table1", "table2", "table7"), 11_750, 7_196),
    MethodSpec("dragin", f"{_M}dragin:DRAGIN", ("table1", "table2", "table7"), 17_582, 8_900),
    MethodSpec("seakr", f"{_M}seakr.method:SeaKR", ("table1", "table2", "table7"), 95_200, 5_642),
    *_SKR,
    MethodSpec("taikc", f"{_M}taikc.method:TAIKC", ("seed",)),
    MethodSpec("taikc-kbae", f"{_M}taikc.method:TAIKCKBAE", ("seed",)),
)}


def find_method(name: str) -> MethodSpec | None:
    """The declaration of method `name` (an alias or any letter case accepted), None if none."""
    return next((m for m in METHODS.values() if name.lower() in (m.name, *m.aliases)), None)


def spec_for(method: str, label: str | None = None, overrides: dict | None = None) -> RunSpec:
    """The run of one method as the tables run it (Self-RAG on its own checkpoint)."""
    known = find_method(method)
    return RunSpec(label or method, method, dict(overrides or {}), known.model if known else None)


# SeaKR as the official code runs it, and with its deviations corrected (docs/faithful-and-
# fixed.md); both run in every profile, side by side, whatever the profile's own mode.
FAITHFUL = {"mode": "faithful", "forced_eos": "replace_last"}
FIXED = {"mode": "fixed", "forced_eos": "append"}
CALIBRATED = "calibrated"          # an ABLATIONS delta resolved to step 03's thresholds at run time

# Table 3 rows (ids as in data/paper/seakr_table3.csv; the paper has no cell for the rows marked
# "ours") -> SeaKR switches on top of the profile's settings.
ABLATIONS: dict[str, dict[str, Any]] = {
    "seakr": {},
    "estimator-prompt": {"estimator": "prompt"},
    "estimator-perplexity": {"estimator": "perplexity_official"},   # what the paper's code computes
    "estimator-perplexity-true": {"estimator": "perplexity"},       # ours: the returned text's
    "estimator-multi-perplexity": {"estimator": "multi_perplexity"},
    "estimator-ln-entropy": {"estimator": "ln_entropy_official"},   # what the paper's code computes
    "estimator-ln-entropy-true": {"estimator": "ln_entropy"},       # ours: Malinin & Gales
    "estimator-energy": {"estimator": "energy"},
    "no-sa-retrieval": {"self_aware_retrieval": False},
    "no-sa-rerank": {"rerank": False},
    "rationales-only": {"reasoning": "rationales"},
    "knowledge-only": {"reasoning": "knowledge"},
    "calibrated-delta": {"delta": CALIBRATED},                       # ours: step 03's delta
    "faithful": FAITHFUL,                                            # ours: the official code
    "fixed": FIXED,                                                  # ours: corrected
}
REASONING_ABLATIONS = ("rationales-only", "knowledge-only")          # complex QA only (paper)


def seed_methods() -> tuple[str, ...]:
    """Notebook 10's rows: the related methods run beside SeaKR (the run layer counts their questions)."""
    return tuple(m.name for m in METHODS.values() if "seed" in m.tables)


# The rows of ours that the paper has no name for: the words a table shows, and its key's line.
ROW_WORDS: dict[str, tuple[str, str]] = {
    "estimator-perplexity-true": ("Perplexity (true)", "the perplexity of the returned text's "
                                  "tokens (the Perplexity row is what the paper's code computes)"),
    "estimator-multi-perplexity": ("Multi-perplexity", "the samples' mean perplexity in place of "
                                   "the Gram determinant"),
    "estimator-ln-entropy-true": ("LN-Entropy (true)", "Malinin & Gales' length-normalised entropy "
                                  "(the LN-Entropy row is what the paper's code computes)"),
    "calibrated-delta": ("SeaKR, calibrated δ", "SeaKR with step 03's calibrated threshold instead "
                         "of the profile's δ"),
    "faithful": ("SeaKR, official code", "SeaKR as the authors' code runs it, its deviations from "
                 "the paper included (README, Faithful and fixed)"),
    "fixed": ("SeaKR, corrected", "SeaKR with those deviations corrected"),
}


@dataclass(frozen=True)
class Table:
    key: str                # table1 ... (what notebooks and the step functions name)
    stem: str               # file name under tables/<profile>/
    step: str               # the notebook that computes it: results/<profile>/<step>/results.csv
    paper: str | None       # data/paper/<paper>.csv
    caption: str
    rows_of: tuple | None = None    # its own RunSpecs (None: METHODS that join it; Table 4: config models)
    datasets: str = "complex"   # complex | simple (datasets.*) | analysis (analysis.datasets)
    sample: str | None = None   # config key of the default questions per data set (None: all)
    rows: str = "method"
    metrics: tuple = ("em", "f1")
    kind: str = "grid"      # grid: `runs` x data sets | backbones: SeaKR per backbones.models,
                            # each calibrated | timing: `runs` timed, call cache off
    f1_figure: str | None = None    # stem of the "F1, ours vs paper" bar figure, if drawn

    @property
    def results(self) -> str:
        """The results CSV, relative to results/<profile>/."""
        return f"{self.step}/results.csv"

    @property
    def runs(self) -> tuple[RunSpec, ...]:
        """Its rows in the paper's order."""
        if self.rows_of is not None:
            return self.rows_of
        return tuple(spec_for(m.name) for m in METHODS.values() if self.key in m.tables)

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.runs)


TABLES: dict[str, Table] = {t.key: t for t in (
    Table("table1", "table1_complex_qa", "04-complex-qa", "seakr_table1",
          "Table 1: complex (multi-hop) QA, EM and F1 (%).", datasets="complex", f1_figure="table1_f1"),
    Table("table2", "table2_simple_qa", "05-simple-qa", "seakr_table2",
          # IRCoT is left out: simple questions need no iterative retrieval (paper)
          "Table 2: simple (single-hop) QA with one retrieval round, EM and F1 (%).", datasets="simple",
          f1_figure="table2_f1"),
    Table("table3", "table3_ablations", "06-ablations", "seakr_table3",
          "Table 3: SeaKR ablations (estimators, self-aware retrieval, re-ranking, reasoning), "
          "EM and F1 (%).",
          rows_of=tuple(RunSpec(label, "seakr", over) for label, over in ABLATIONS.items()),
          datasets="analysis", sample="analysis.n_questions"),
    Table("table4", "table4_backbones", "07-backbones", "seakr_table4",
          "Table 4: SeaKR with different backbone LLMs, EM and F1 (%).", rows_of=(),
          datasets="analysis", sample="analysis.n_questions", rows="model", kind="backbones"),
    Table("table7", "table7_efficiency", "09-efficiency", "seakr_table7",
          "Table 7: wall time per question (s), LLM call cache off (notebook 09 also lists LLM "
          "calls and retrievals).",
          datasets="complex", metrics=("seconds_per_question",), kind="timing"),
)}


def table(key: str) -> Table:
    if key not in TABLES:
        from .core.errors import UserError
        raise UserError(f"no paper table '{key}'", setting="table",
                        fix=f"use one of {', '.join(TABLES)}")
    return TABLES[key]


def methods(key: str) -> tuple[str, ...]:
    """The row labels of a table, in the paper's order."""
    return table(key).methods


# Figure 3: three panels from step 03's CSVs (relative to results/<profile>/), each with the
# markers notebook 03 chose. `marker`: layer = uncertainty.layer resolved for the model; delta =
# step 03's calibrated delta of eigen, and the paper's -6 where the model is the paper's.
@dataclass(frozen=True)
class Panel:
    stem: str               # figures/<profile>/<stem>.png|pdf
    csv: str
    plot: str               # a function of reporting.figures
    marker: str | None = None   # None | layer | delta


FIGURE3 = (
    Panel("figure3_k", "03-uncertainty-estimators/quality_vs_k.csv", "plot_quality_vs_k"),
    Panel("figure3_layer", "03-uncertainty-estimators/quality_vs_layer.csv", "plot_quality_vs_layer",
          marker="layer"),
    Panel("figure3_delta", "03-uncertainty-estimators/delta_sweep.csv", "plot_delta_tradeoff",
          marker="delta"),
)
FIGURES: dict[str, Panel] = {p.stem: p for p in FIGURE3}
PAPER_DELTA_MODELS = ("llama-2-7b",)   # models on whose U scale the paper's delta -6 is comparable


# The step graph: what each numbered notebook reads and writes, so `reproduce` re-runs a step when
# the content of something it reads changed, and not merely because an earlier step ran again
# (step_graph.py). `reads`: the steps whose outputs it reads, a step's name for all of them or
# "step:output" for one (04 reads only step 03's calibration/delta.json, not its AUROC tables);
# `settings`: the profile's sections it reads (None: all of them; a notebook's own `notebooks:`
# entry enters through its parameters); `shipped`: folders under data/ it reads; `outputs`: what
# it writes, as globs under results/<profile>/ ("tables/..." and "figures/...": under
# tables/<profile>/ and figures/<profile>/; None: not declared, so a step reading it re-runs
# whenever it ran); `dry_run`: the notebook parameters that size its work where `cost`'s dry run
# runs it (price.dry_run; None: a step it does not run, having no model calls). The runs a step
# writes (one file each under results/<profile>/runs/) follow from TABLES and METHODS
# (runs.plan.planned_runs). Each step's folder name is spelled here only; other modules take it
# from STEPS, a table's `step` or these names.
@dataclass(frozen=True)
class Step:
    name: str
    reads: tuple = ()
    settings: tuple | None = None
    shipped: tuple = ("bundled",)
    outputs: tuple | None = None
    dry_run: tuple | None = None

    def read_steps(self) -> tuple[str, ...]:
        """The steps it reads (an entry "step:output" names its step)."""
        return tuple(dict.fromkeys(r.split(":", 1)[0] for r in self.reads))


EXTRACTION, CALIBRATION = "02-extract-hidden-states", "03-uncertainty-estimators"
SEED_STEP, MECHANISMS = "10-seed-methods", "11-mechanisms"
_DATA = ("seed", "corpus", "datasets", "analysis", "evaluation")
_PREPARED = ("00-prepare-data", "01-build-bm25-index")        # question records and the index
_CALIBRATED = _PREPARED + (f"{CALIBRATION}:calibration",)     # ... and step 03's thresholds
_N = ("N_QUESTIONS",)

STEPS: dict[str, Step] = {s.name: s for s in (
    Step("00-prepare-data", settings=_DATA, outputs=("00-prepare-data", "data")),
    # the index itself lies under data/cache/, keyed by its settings; index_meta.json describes it
    Step("01-build-bm25-index", ("00-prepare-data",), settings=_DATA + ("retrieval",),
         outputs=("01-build-bm25-index",)),
    # closed-book calibration questions (FanOutQA from its package, the bundled single-hop set);
    # another backend's samples go to 02-extract-hidden-states-<backend> (steps.extraction)
    Step(EXTRACTION, settings=("seed", "model", "uncertainty", "evaluation", "prompts"),
         outputs=(f"{EXTRACTION}*",), dry_run=("N_FANOUT", "N_BUNDLED")),
    Step(CALIBRATION, (EXTRACTION,), settings=("seed", "model", "uncertainty", "evaluation"),
         outputs=(CALIBRATION, "calibration"), dry_run=()),
    Step("04-complex-qa", _CALIBRATED, shipped=("bundled", "paper"), outputs=("04-complex-qa",), dry_run=_N),
    Step("05-simple-qa", _CALIBRATED, shipped=("bundled", "paper"), outputs=("05-simple-qa",), dry_run=_N),
    Step("06-ablations", _CALIBRATED, shipped=("bundled", "paper"), outputs=("06-ablations",), dry_run=()),
    # calibrates each backbone itself
    Step("07-backbones", _PREPARED, shipped=("bundled", "paper"), outputs=("07-backbones",),
         dry_run=("N_CAL_FANOUT", "N_CAL_BUNDLED")),
    Step("08-case-studies", ("04-complex-qa",), settings=("seed",), shipped=(),     # step 04's traces
         outputs=("08-case-studies",)),
    # its timed runs lie in its own folder (09-efficiency/runs/), outside the shared run files
    Step("09-efficiency", _CALIBRATED, shipped=("bundled", "paper"), outputs=("09-efficiency",), dry_run=_N),
    Step(SEED_STEP, _PREPARED + ("04-complex-qa", "05-simple-qa"),   # SeaKR's rows: 04/05's runs
         outputs=(SEED_STEP,), dry_run=_N + ("N_TRAIN", "N_KBAE")),
    Step(MECHANISMS, _CALIBRATED, outputs=(MECHANISMS, "figures/mechanisms.*"), dry_run=_N),
    # every table's step, Figure 3's (03) and the claims ledger's (03, 11 and the tables)
    Step("90-render", tuple(sorted({t.step for t in TABLES.values()} | {CALIBRATION, MECHANISMS})),
         shipped=("paper",),
         outputs=tuple(f"tables/{t.stem}.*" for t in TABLES.values()) + ("tables/claims.*",) +
         tuple(f"figures/{p.stem}.*" for p in FIGURE3) +
         tuple(f"figures/{t.f1_figure}.*" for t in TABLES.values() if t.f1_figure)),
)}
