"""`python -m seakr_repro <command>`: the same steps the notebooks take, from a shell.

Every command but `bench` and `nbstrip` takes --profile (a profile of params/: smoke, default,
paper, paper-sample, paper-vllm) and --set key=value overrides; `bench NAME` runs one of the
developers' benchmarks with its own options. Errors in the user's input end with one paragraph
naming the file/line/setting and the fix (exit status 2).
"""
from __future__ import annotations

import argparse
import json
import sys

from .core.errors import UserError, report_and_exit


def _overrides(texts) -> dict:
    from .core.config import parse_override

    return dict(parse_override(s) for s in (texts or []))


def _config(args):
    from .core.config import load_config

    return load_config(args.profile, _overrides(args.set))


def cmd_corpus(args):
    from .data import corpus

    if args.source == "wiki-excerpt":
        n = corpus.build_wiki_excerpt_corpus(args.out, args.words, progress=not args.quiet)
    else:
        n = corpus.convert_dpr_tsv(args.tsv, args.out, progress=not args.quiet)
    print(f"wrote {n:,} passages to {args.out}")


def cmd_prepare(args):
    from .steps.prepare import dataset_statistics, ensure_corpus, prepare_datasets, source_notes

    cfg = _config(args)
    path = ensure_corpus(cfg, progress=not args.quiet)
    print(f"corpus: {path}")
    loaded = prepare_datasets(cfg, args.dataset or None)
    print(dataset_statistics(loaded, source_notes(cfg)).to_markdown(index=False))


def cmd_index(args):
    from .steps.prepare import ensure_index

    cfg = _config(args)
    meta = ensure_index(cfg, progress=not args.quiet, force=args.force)
    print(f"{meta.get('backend')} index with {meta.get('doc_count', 0):,} documents "
          f"(corpus lines {meta.get('corpus_lines', '?'):,}) at {meta.get('index_dir', '')}")


def cmd_search(args):
    from .retrieval import searcher_for

    cfg = _config(args)
    searcher = searcher_for(cfg)
    for query in args.query:
        hits = searcher.search(query, k=args.k)
        if args.json:
            print(json.dumps({"query": query, "hits": [h.__dict__ for h in hits]}, ensure_ascii=False))
            continue
        print(f"\nquery: {query}")
        for rank, h in enumerate(hits, 1):
            print(f"  {rank}. [{h.id}] {h.score:.2f}  {h.title}: {h.text[:160]}...")


def cmd_datasets(args):
    from .data.registry import DATASETS, TRAIN_SPLITS, dataset_available, describe_missing
    from .core.paths import RESULTS_ROOT
    from .runs.inputs import profile_datasets

    cfg = _config(args)
    used = profile_datasets(cfg)
    analysis = cfg.get("analysis.datasets") or used
    trains = {TRAIN_SPLITS[d]: d for d in used if d in TRAIN_SPLITS}
    n, seed = cfg["datasets.n_questions"], cfg["datasets.sample_seed"]
    print(f"profile {cfg.profile}: " + (f"a sample of {n} questions per data set (seed {seed})"
                                        if n is not None else "every question of each data set"))
    names = list(DATASETS) if args.all else used + list(trains)
    rows = []
    for name in names:
        spec = DATASETS[name]
        role = ("evaluated" + (", analysis" if name in analysis else "") if name in used else
                f"training split of {trains[name]}" if name in trains else "-")
        prepared = RESULTS_ROOT / cfg.profile / "data" / f"{name}.jsonl"
        count = (sum(1 for line in prepared.open(encoding="utf-8") if line.strip())
                 if name in used and prepared.is_file() else None)
        ok = dataset_available(name)
        rows.append((name, spec.kind, role, "yes" if ok else "missing",
                     "-" if count is None else f"{count:,}",
                     "-" if spec.paper_size is None else f"{spec.paper_size:,}"))
        if not ok and args.verbose:
            rows.append(("", "", "", "", "", "    " + describe_missing(name)))
    header = ("data set", "kind", "use in this profile", "on disk", "prepared", "paper (Table 6)")
    widths = [max(len(r[i]) for r in [header, *rows] if i < 5 or r[0]) for i in range(6)]
    for row in [header, *rows]:
        if not row[0]:          # the download note under a missing data set
            print(row[5])
            continue
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    missing = [r[0] for r in rows if r[3] == "missing" and r[0] in used]
    if missing and not args.verbose:
        print(f"missing: {', '.join(missing)} (-v says where to get them and where to put them)")


def cmd_reproduce(args):
    from .pipeline import parse_param, reproduce

    overrides = _overrides(args.set)
    parameters: dict[str, dict] = {}
    for text in args.param or []:
        step, name, value = parse_param(text)
        parameters.setdefault(step, {})[name] = value
    if args.dry_run:
        from .core.which_clone import checked_repo_root
        from .pipeline import dry_run_report, plan
        print(f"repository root: {checked_repo_root()}")
        print(dry_run_report(plan(args.profile, only=args.only, force=args.force,
                                  parameters=parameters, overrides=overrides)))
        return
    results = reproduce(args.profile, only=args.only, force=args.force, overrides=overrides,
                        parameters=parameters, cell_timeout=args.cell_timeout, preflight=not args.no_preflight,
                        progress=not args.quiet)
    ran = [r for r in results if r.status == "ran"]
    print(f"[reproduce] profile {args.profile}: {len(ran)} step(s) ran, "
          f"{sum(r.status == 'up-to-date' for r in results)} up to date")


def cmd_preflight(args):
    from .runs.preflight import check, run_checks

    cfg = _config(args)
    report = run_checks(cfg, strict=args.strict)
    print("\n".join(line for line in report.text().splitlines() if "MISSING" not in line), flush=True)
    check(cfg, announce=False, report=report)     # all missing pieces in one paragraph, exit 2
    print(f"[preflight] profile {args.profile}: everything needed is in place")


def cmd_status(args):
    from .commands.status import report

    print(report(_config(args), cache=args.cache))


def cmd_compare_runs(args):
    from .commands.compare_runs import compare, parse_labels

    labels = parse_labels(args.labels)
    compare(_config(args), args.run_a, args.run_b, labels, args.n_boot, args.out)


def cmd_nbstrip(args):
    from .commands.nbstrip import main

    main()


def cmd_bench(args) -> int:
    from .benchmarks import run_benchmark

    got = run_benchmark(args.name, args.args)
    if isinstance(got, int):          # the scale check returns its exit status
        return got
    # a benchmark whose own checks failed (different tokens, vectors out of tolerance) exits 1,
    # so a script or the card check cannot read its timings as a success
    if isinstance(got, dict) and got.get("ok") is False:
        print(f"bench {args.name}: its checks failed (\"ok\": false in its report)", file=sys.stderr)
        return 1
    return 0


def cmd_cost(args):
    from pathlib import Path

    from .core.paths import CACHE_DIR, repo_relative
    from .price import command as cost
    from .price.paces import record_pace

    cfg = _config(args)
    if args.record_pace:
        path = record_pace(cfg, args.record_pace, args.machine, cost.checkout_commit())
        print(f"[cost] recorded the run of profile {cfg.profile} in {repo_relative(path)}")
        return
    overrides = _overrides(args.set)
    replay = None if args.no_replay else Path(args.replay_cache or CACHE_DIR)
    got = cost.predict(cfg, overrides, sample=args.sample, replay=replay, refresh=args.refresh,
                       verbose=args.verbose, seeds=args.seeds)
    units, used = cost.priced(cfg, got)
    beside = cost.beside_run(cfg, units)
    if args.json:
        out = cost.as_json(cfg, got, units, used)
        if beside is not None:
            out["beside_run"] = json.loads(beside.to_json(orient="records"))
        print(json.dumps(out, indent=1, default=str))
        return
    print(cost.report(cfg, got, units, used, runs=args.runs, workers=args.workers))
    if beside is not None:
        print("\n" + cost.beside_text(cfg, got, beside))


def cmd_run(args):
    from .artifacts import spec_for
    from .runs.engine import open_pool
    from .runs.grid import run_grid, select_questions
    from .steps.prepare import ensure_index, prepare_datasets
    from .runs.inputs import open_profile_searcher

    cfg = _config(args)
    prepare_datasets(cfg, [args.dataset])
    select_questions(cfg, args.dataset, args.n)     # -n beyond the prepared set: say so now
    ensure_index(cfg, progress=not args.quiet)
    spec = spec_for(args.method, args.label, _overrides(args.method_set))      # Self-RAG: its own checkpoint
    pool = open_pool(cfg, primary=spec.model is None)   # runner.engine: here, or Ray workers
    try:
        results, skipped = run_grid(cfg, pool, open_profile_searcher(cfg), [spec],
                                    [args.dataset], args.n, progress=not args.quiet)
    finally:
        pool.close()
    if skipped:
        raise UserError(next(iter(skipped.values())), setting="method",
                        fix="supply what the message names, or choose another method")
    print(results[["method", "dataset", "metric", "value", "low", "high", "n", "retrievals_per_q",
                   "seconds_per_q", "run_file"]].to_markdown(index=False))


def cmd_render(args):
    from .core.paths import FIGURES_DIR, repo_relative
    from .steps.render import declared_figures, render_all, render_figures

    cfg = _config(args)
    print(render_all(cfg).to_markdown(index=False))
    written = render_figures(cfg)
    for path in written:
        print(f"figure: {repo_relative(path)}")
    skipped = [s for s in declared_figures() if s not in {p.stem for p in written}]
    if skipped:
        print(f"figures skipped, files under {repo_relative(FIGURES_DIR / cfg.profile)}/ left as they "
              f"are (no results/{cfg.profile}/ to draw them from): {', '.join(skipped)}")


def _arg(*flags, **kwargs):
    return flags, kwargs


# the options every subcommand that reads a profile takes beside --profile (its default per command)
PROFILE_ARGS = [
    _arg("--set", action="append", metavar="KEY=VALUE",
         help="override a setting, e.g. --set retrieval.backend=bm25s (repeatable)"),
    _arg("--quiet", action="store_true", help="no progress bars"),
]
# each such subcommand: its function, its help, its own arguments (bench and nbstrip, which read no
# profile, are added in build_parser)
COMMANDS = {
    "corpus": (cmd_corpus, "build a corpus JSONL: the default Wikipedia excerpt or DPR's psgs_w100.tsv", [
        _arg("--source", choices=["wiki-excerpt", "dpr"], default="wiki-excerpt"),
        _arg("--tsv", default="data/raw/psgs_w100.tsv", help="DPR passages TSV (for --source dpr)"),
        _arg("--out", required=True, help="output JSONL path"),
        _arg("--words", type=int, default=100, help="words per passage (wiki-excerpt)")]),
    "prepare": (cmd_prepare, "build the corpus and load/validate the profile's question sets", [
        _arg("--dataset", action="append", help="only this data set (repeatable)")]),
    "index": (cmd_index, "build the BM25 index of the profile's corpus (pyserini or bm25s)", [
        _arg("--force", action="store_true", help="rebuild even if up to date")]),
    "search": (cmd_search, "search the profile's BM25 index", [
        _arg("query", nargs="+", help="query text (several queries allowed)"),
        _arg("-k", type=int, default=3, help="number of passages (default 3)"),
        _arg("--json", action="store_true", help="print JSON lines")]),
    "datasets": (cmd_datasets, "the profile's data sets: their use, whether they are on disk, how many "
                 "questions were prepared", [
        _arg("--verbose", "-v", action="store_true", help="show download instructions"),
        _arg("--all", action="store_true", help="every known data set, not only the profile's")]),
    "reproduce": (cmd_reproduce, "run every notebook for the profile, incrementally", [
        _arg("--only", action="append", help="only this step (e.g. 00 or 01-build-bm25-index)"),
        _arg("--force", action="store_true", help="re-run even if up to date"),
        _arg("--dry-run", action="store_true",
             help="run nothing: list the steps that would run and why"),
        _arg("--param", action="append", metavar="NOTEBOOK:NAME=VALUE",
             help="a notebook parameter for this run, e.g. --param 03:N_BOOT=200 (repeatable; "
                  "wins over the parameters cell and the profile, and the notebook says so)"),
        _arg("--cell-timeout", type=float, default=None, metavar="SECONDS",
             help="stop a notebook cell after this many seconds (default: "
                  "reproduce.cell_timeout, null = no limit)"),
        _arg("--no-preflight", action="store_true",
             help="skip the check of models, corpus, data sets, disk and GPU before starting")]),
    "preflight": (cmd_preflight, "check that everything the profile needs is in place "
                  "(models, corpus, data, disk, GPU)", [
        _arg("--strict", action="store_true",
             help="optional models (Self-RAG, Table 4 backbones) are required too")]),
    "status": (cmd_status, "progress of a (running) reproduce: steps, questions done, EM/F1 so far, "
               "ETA, disk", [
        _arg("--cache", action="store_true", help="also measure the cache directory (slow at paper scale)")]),
    "compare-runs": (cmd_compare_runs, "two runs of a profile side by side (float32 against bfloat16, "
                                         "say): every row of the claims ledger and every estimator's AUROC", [
        _arg("run_a", help="the first run's results folder, e.g. results/default (float32)"),
        _arg("run_b", help="the second run's, e.g. results-bf16/default"),
        _arg("--labels", default="A,B", help="names of the two runs, e.g. float32,bfloat16"),
        _arg("--n-boot", type=int, default=None, help="bootstrap resamples (default: the profile's)"),
        _arg("--out", default=None, help="also write ledger.csv and auroc.csv (and .md) here")]),
    "cost": (cmd_cost, "what make reproduce costs, every step with model calls: question-runs, calls "
             "made and unique, tokens, hours at a pace (a dry run; beside a run's own files once there)", [
        _arg("--runs", action="store_true", help="also list every unit (table, method x data set)"),
        _arg("--json", action="store_true", help="print the figures as JSON"),
        _arg("--workers", type=int, default=None, metavar="N",
             help="also divide the hours over N Ray workers (arithmetic)"),
        _arg("--sample", type=int, default=None, metavar="N",
             help="dry-run at most N questions per data set and step, scaled up (default: all)"),
        _arg("--replay-cache", default=None, metavar="DIR",
             help="replay the real model's calls from this cache folder (default: SEAKR_CACHE_DIR)"),
        _arg("--no-replay", action="store_true", help="every call from the synthetic model"),
        _arg("--seeds", type=int, default=3, metavar="N",
             help="the mean of N draws of the synthetic model's decisions (default: 3)"),
        _arg("--refresh", action="store_true", help="run the dry run again, not its kept result"),
        _arg("--verbose", action="store_true", help="show the dry run's steps as they run"),
        _arg("--record-pace", default=None, metavar="NOTE",
             help="record the profile's finished run (seconds, computed calls and tokens per step) "
                  "in data/measured/cpu_pace.csv, with this note; no prediction"),
        _arg("--machine", default="this machine", help="the machine --record-pace names")]),
    "run": (cmd_run, "run one method on one data set (resumable), print EM/F1 and costs", [
        _arg("--method", required=True,
             help="cot | ircot | flare | dragin | self_rag | seakr | skr-prompt"),
        _arg("--dataset", required=True, help="a name from `datasets`, e.g. bundled-2wiki or 2wiki"),
        _arg("-n", type=int, default=None,
             help="a seeded random sample of n questions of the prepared set (default: all)"),
        _arg("--label", help="name of the run in the results (default: the method)"),
        _arg("--method-set", action="append", metavar="KEY=VALUE",
             help="a method setting, e.g. --method-set estimator=perplexity --method-set rerank=false")]),
    "render": (cmd_render, "re-render every table and figure from saved results", []),
}


def build_parser() -> argparse.ArgumentParser:
    from .benchmarks import BENCHMARKS

    parser = argparse.ArgumentParser(prog="python -m seakr_repro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")

    def add(name, func, help_text, arguments=(), profile="default"):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--profile", default=profile, help=f"params/<profile>.yaml (default: {profile})")
        for flags, kwargs in PROFILE_ARGS + list(arguments):
            p.add_argument(*flags, **kwargs)
        p.set_defaults(func=func)
        return p

    for name, (func, help_text, arguments) in COMMANDS.items():
        add(name, func, help_text, arguments)
    from .card_check.check import add_arguments, cmd_check_card
    add_arguments(add("check-card", cmd_check_card, "does the profile fit this GPU, how fast does it go, what "
                      "would it cost: random weights of its model's shape under its card's cap",
                      profile="paper"))

    text = "a developers' benchmark: bench NAME [its options] (bench NAME --help gives them)"
    p = sub.add_parser("bench", help=text, description=text, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="benchmarks:\n" +
                              "\n".join(f"  {name:<14} {what}" for name, what in BENCHMARKS.items()))
    p.add_argument("name", choices=list(BENCHMARKS), metavar="NAME", help="the benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its options")
    p.set_defaults(func=cmd_bench)

    text = ("git's clean filter for notebooks/*.ipynb: a notebook on stdin, on stdout without outputs, "
            "execution counts or Lab metadata (make sets it up)")
    sub.add_parser("nbstrip", help=text, description=text).set_defaults(func=cmd_nbstrip)
    return parser


# commands that write the profile's results folder: a stop of theirs on a full disk is recorded
# there for `status` (render writes tables/ and figures/ only: on a fresh clone it must not create
# results/<profile>)
WRITES_RESULTS = ("run", "prepare", "index")


def _said_to_disk_full(args, argv):
    """What a disk-full paragraph says of this command: its profile, preflight's estimate of what
    it still has to write, and the command line that resumes it (this one, as typed)."""
    from .core import disk_full
    from .core.resume import from_here, python_command
    from .runs.disk_needs import needs_by_place

    words = list(sys.argv[1:] if argv is None else argv)
    resume = from_here(python_command(["-m", "seakr_repro", *words]))
    if getattr(args, "profile", None) is None:      # bench, nbstrip: no profile, no estimate
        return disk_full.recording_stop_of(disk_full.Run(resume=resume))
    run = disk_full.Run(args.profile, resume, lambda: needs_by_place(_config(args)))
    return disk_full.recording_stop_of(run, reserve=args.command in WRITES_RESULTS)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _said_to_disk_full(args, argv):
            status = args.func(args)
    except UserError as err:
        report_and_exit(err)
    except KeyboardInterrupt:
        print("\ninterrupted: results written so far are kept; run the command again to resume",
              file=sys.stderr)
        return 130
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
