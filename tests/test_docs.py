"""The README and docs/ stay true: links resolve, named make targets exist, every quoted command
runs (`make -n`, the command line's parser and `--help`), named settings exist in
params/base.yaml, and the README's claims table matches the ledger."""
import argparse
import contextlib
import functools
import importlib.util
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from seakr_repro.benchmarks import benchmark
from seakr_repro.cli import build_parser, main as cli_main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Settings the docs name on purpose although base.yaml lacks them. Keep this list short.
ALLOWED_UNKNOWN_SETTINGS = {
    "uncertainty.kk",  # docs/paper-profile.md: the misspelt key of the settings-check example
}
FILE_SUFFIXES = {"py", "json", "jsonl", "yaml", "yml", "md", "csv", "tsv", "npz", "npy", "zip",
                 "ipynb", "tex", "pdf", "png", "txt", "sh", "gz", "lock", "toml", "cfg", "html"}
SHELL_LANGS = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(```|~~~)([^\n]*)\n(.*?)^\1[ \t]*$", re.M | re.S)


# ---------------------------------------------------------------- Markdown parsing

def fenced_blocks(text):
    """(language, body) of every fenced code block."""
    return [(m.group(2).strip().lower(), m.group(3)) for m in FENCE.finditer(text)]


def prose(text):
    """The text without fenced blocks (their lines kept blank, so nothing merges)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def code_spans(text):
    """Inline code spans outside fenced blocks; a span may wrap lines but not cross a blank one."""
    spans = []
    for para in re.split(r"\n[ \t]*\n", prose(text)):
        spans += [" ".join(m.group(2).split()) for m in re.finditer(r"(`+)(.+?)\1", para, re.S)]
    return spans


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for line in prose(text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_slug(m.group(1))
            n = seen.get(slug, 0)
            out.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return out


def links(text):
    """Targets of Markdown links and images, outside code."""
    body = re.sub(r"(`+)(.+?)\1", "", prose(text), flags=re.S)
    return re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", body)


def broken_links(page):
    """Relative links of a Markdown file whose file or #anchor does not exist."""
    bad = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.name}: {target} (no such file)")
        elif anchor and (dest.is_dir() or dest.suffix != ".md"
                         or anchor not in anchors(dest.read_text(encoding="utf-8"))):
            bad.append(f"{page.name}: {target} (no such heading)")
    return bad


# ---------------------------------------------------------------- make targets and commands

def makefile_targets(makefile_text):
    return set(re.findall(r"^([A-Za-z0-9_.-]+)[ \t]*:(?!=)", makefile_text, re.M))


def make_target(argv):
    """The target a `make ...` argv names (variables skipped; none = the default goal)."""
    words = [a for a in argv[1:] if "=" not in a and not a.startswith("-")]
    return words[0] if words else None


def named_make_targets(text):
    """Targets of every `make X` in code spans and fenced blocks."""
    pieces = code_spans(text) + [line for _, body in fenced_blocks(text) for line in body.splitlines()]
    return {target for piece in pieces   # each span and line alone: `make` then `python` is no target
            for target in re.findall(r"(?<![\w/.-])make[ \t]+(?:[A-Z_]+=\S+[ \t]+)*([a-z][\w-]*)", piece)}


def fenced_commands(text):
    """argv of each command line in the shell blocks (continuations joined, comments dropped)."""
    out = []
    for lang, body in fenced_blocks(text):
        if lang in SHELL_LANGS:
            for line in body.replace("\\\n", " ").splitlines():
                argv = shlex.split(line, comments=True)
                if argv:
                    out.append(argv)
    return out


def _without_assignments(argv):
    """argv less its leading VAR=value words, and those as an environment."""
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
        name, _, value = argv[0].partition("=")
        env[name], argv = value, argv[1:]
    return argv, env


def quoted_commands(text):
    """argv of every command a page quotes: each line of its shell blocks, and each code span in
    its prose that is a `make ...` or `python -m ...` command."""
    spans = []
    for span in code_spans(text):
        with contextlib.suppress(ValueError):
            argv = shlex.split(span)
            words = _without_assignments(argv)[0]
            if words and (words[0] == "make" or (Path(words[0]).name.startswith("python") and words[1:2] == ["-m"])):
                spans.append(argv)
    return fenced_commands(text) + spans


# a word that stands for what the reader fills in: `bench NAME`, `seakr_repro ...`, `tools.<module>`
PLACEHOLDER = re.compile(r"\.\.\.|NAME|.*<\w+>.*")


@functools.lru_cache(maxsize=None)
def strict_parser():
    """The command line's parser, refusing abbreviated options: the docs spell each one out."""
    parser = build_parser()
    parser.allow_abbrev = False
    for action in parser._actions:  # noqa: SLF001 (argparse keeps its subparsers only here)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                sub.allow_abbrev = False
    return parser


def check_bench_args(name, args):
    """`bench NAME ARGS`: exits (SystemExit) when the benchmark's own parser, refusing abbreviated
    options too, does not accept ARGS (a benchmark without `parser()` is checked by name only)."""
    module = benchmark(name)
    if hasattr(module, "parser"):
        parser = module.parser()
        parser.allow_abbrev = False
        parser.parse_args(args)


def _exit_code(run) -> int | None:
    """How `run()` exits (None: it returned), its output swallowed."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()
    except SystemExit as exc:
        return exc.code or 0
    return None


def _cli_problem(args):
    """`python -m seakr_repro ARGS`: parsed as written, and `--help` of the command it names (up
    to a placeholder: `bench NAME` asks `bench --help`; no ARGS, the whole command line's)."""
    cut = next((i for i, a in enumerate(args) if PLACEHOLDER.fullmatch(a)), None)
    if cut is None and args:
        def parse():
            parsed = strict_parser().parse_args(args)
            if parsed.command == "bench":
                check_bench_args(parsed.name, parsed.args)
        if _exit_code(parse) not in (None, 0):
            return f"seakr_repro does not accept {shlex.join(args)!r}"
    words = [a for a in args[:cut] if not a.startswith("-")][:2 if args[:1] == ["bench"] else 1]
    if _exit_code(lambda: cli_main([*words, "--help"])) != 0:
        return f"python -m seakr_repro {shlex.join(words)} --help does not exit 0"
    return None


def _module_problem(module):
    """`python -m MODULE`: it exists; one of the package's must run as a program (a package with
    its __main__, or a module with a __main__ guard) and end well given `--help`."""
    cut = module.split("<")[0].rstrip(".")         # `seakr_repro.tools.<module>`: its package
    try:
        spec = importlib.util.find_spec(cut)
    except ImportError:
        spec = None
    if spec is None:
        return f"no module {cut}"
    if cut != module or not module.startswith("seakr_repro."):
        return None
    if spec.submodule_search_locations:
        if importlib.util.find_spec(module + ".__main__") is None:
            return f"{module} is a package without __main__"
    elif 'if __name__ == "__main__"' not in Path(spec.origin).read_text(encoding="utf-8"):
        return f"{module} does not run as a program (no __main__ guard)"
    argv = sys.argv
    try:
        sys.argv = [module, "--help"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)       # already imported: run again
            code = _exit_code(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
    finally:
        sys.argv = argv
    return None if code in (None, 0) else f"python -m {module} --help exits {code}"


def _make_problem(argv, env):
    """`make ...`: `make -n` (what it would run, nothing run) succeeds, and each command line of
    the package it would run is itself a command that runs."""
    done = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)
    if done.returncode:
        return f"make -n {shlex.join(argv[1:])} fails: {done.stderr.strip()[-300:]}"
    for line in done.stdout.splitlines():
        if re.match(r"^\S*python\S* -m seakr_repro( [^;&|<>$`]*)?$", line):
            if problem := command_problem(shlex.split(line)):
                return f"make {shlex.join(argv[1:])} runs {line!r}: {problem}"
    return None


def command_problem(argv):
    """Why a documented command would not run as written, or None."""
    argv, env = _without_assignments(argv)
    if not argv:
        return "only variable assignments"
    if argv[0] == "make":
        return _make_problem(argv, env)
    if Path(argv[0]).name.startswith("python") and argv[1:2] == ["-m"] and len(argv) > 2:
        module, args = argv[2], argv[3:]
        return _cli_problem(args) if module == "seakr_repro" else _module_problem(module)
    return f"not a make or python -m command: {shlex.join(argv)}"


# ---------------------------------------------------------------- settings

def _code_namespaces():
    """First components of dotted names that are code, not settings: the package's modules."""
    pkg = ROOT / "seakr_repro"
    names = {"seakr_repro"}
    for path in pkg.rglob("*"):
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
            names.add(path.stem)
    return names


def setting_candidates(span):
    """Dotted setting keys a code span names: `a.b`, `a.b: value`, `a.b=value`, `--set a.b=v`."""
    keys = re.findall(r"--set[ =]([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)=", span)  # not `--set key=value`
    head = re.split(r"[\s:=]", span, maxsplit=1)[0]
    if re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", head) and head.rsplit(".", 1)[1] not in FILE_SUFFIXES:
        keys.append(head)
    return keys


def unknown_settings(text, base, code_namespaces):
    """Dotted keys named in code spans that base.yaml lacks. A key whose first part is not a
    top-level setting but a module of the package (`runs.grid`) or an importable module
    (`torch.multinomial`) is code and skipped."""
    bad = []
    shell_lines = [line for lang, body in fenced_blocks(text) if lang in SHELL_LANGS for line in body.splitlines()]
    for span in code_spans(text) + shell_lines:
        for key in setting_candidates(span):
            first = key.split(".")[0]
            if first not in base and (first in code_namespaces or importlib.util.find_spec(first)):
                continue
            node = base
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    if key not in ALLOWED_UNKNOWN_SETTINGS:
                        bad.append(key)
                    break
                node = node[part]
    return bad


def _base():
    return yaml.safe_load((ROOT / "params" / "base.yaml").read_text())


# ---------------------------------------------------------------- the checks

@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_readme_links_every_docs_page():
    readme_links = set(links((ROOT / "README.md").read_text()))
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme_links, page.name


def test_make_targets_named_in_readme_exist():
    assert {"reproduce", "test"} <= named_make_targets((ROOT / "README.md").read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_make_targets_named_exist(page):
    targets = makefile_targets((ROOT / "Makefile").read_text())
    assert sorted(named_make_targets(page.read_text()) - targets) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_quoted_commands_run(page):
    """Each `make ...` and `python -m ...` a page quotes (in a shell block or a code span) runs as
    written: `make -n`, the command line's parser, `--help`."""
    commands = sorted({shlex.join(argv) for argv in quoted_commands(page.read_text(encoding="utf-8"))})
    assert [p for p in (command_problem(shlex.split(c)) for c in commands) if p] == []


def test_the_quoted_commands_are_found():
    """Known commands of the pages, from shell blocks and from prose."""
    quoted = {shlex.join(a) for page in PAGES for a in quoted_commands(page.read_text(encoding="utf-8"))}
    assert {"make reproduce PROFILE=paper", "python -m seakr_repro preflight --profile paper",
            "python -m seakr_repro bench decode", "make setup-vllm"} <= quoted


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_settings_exist(page):
    assert unknown_settings(page.read_text(), _base(), _code_namespaces()) == []


def test_readme_verdicts_match_the_ledger():
    claims = (ROOT / "tables/default/claims.md").read_text()
    ledger = dict(re.findall(r"^\| (\d) \| \*\*[^*]+\*\* \(([^)]+)\)", claims, re.M))
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| # | claim | verdict |"):].split("\n\n")[0]
    ours = dict(re.findall(r"^\| (\d) \| [^|]+ \| ([^|]+?) \|", table, re.M))
    assert len(ledger) == 7 and ours == ledger


# ---------------------------------------------------------------- the checker fails when it should

def test_broken_link_and_anchor_are_reported(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## The paper profile's cost\n")
    page = tmp_path / "p.md"
    page.write_text("[ok](a.md) [ok](a.md#the-paper-profiles-cost) [ok](#here) [web](https://x.org/y)\n"
                    "# Here\n[gone](missing.md) [bad](a.md#nope) `[code](missing2.md)`\n"
                    "```\n[fenced](missing3.md)\n```\n")
    assert broken_links(page) == ["p.md: missing.md (no such file)", "p.md: a.md#nope (no such heading)"]


def test_unknown_make_target_is_reported():
    targets = makefile_targets("help:  ## x\nreproduce: $(STAMP)\nVAR := 1\n$(STAMP): a\n")
    assert targets == {"help", "reproduce"}
    named = named_make_targets("run `make reproduce PROFILE=paper` or `make PROFILE=x figures`")
    assert named == {"reproduce", "figures"}
    assert named_make_targets("a `make` target, or `python -m x`") == set()
    assert command_problem(["make", "reproduce", "PROFILE=paper"]) is None
    assert command_problem(["make", "reproduc"]).startswith("make -n reproduc fails: ")


def test_bad_commands_are_reported():
    text = "```bash\nmake test   # the tests\n.venv/bin/python -m seakr_repro search \"a b\" \\\n    -k 3\n```\n"
    assert fenced_commands(text) == [["make", "test"],
                                     [".venv/bin/python", "-m", "seakr_repro", "search", "a b", "-k", "3"]]
    prose_text = "run `python -m seakr_repro status`, `make test` or `SEAKR_X=1 make lab`; not `seakr_repro`"
    assert quoted_commands(prose_text) == [["python", "-m", "seakr_repro", "status"], ["make", "test"],
                                          ["SEAKR_X=1", "make", "lab"]]
    assert command_problem(fenced_commands(text)[1]) is None
    assert command_problem(["python", "-m", "seakr_repro", "no-such-command"])
    assert command_problem(["python", "-m", "seakr_repro", "status", "--no-such-flag"])
    assert command_problem(["python", "-m", "seakr_repro", "status", "--profil", "paper"])
    assert command_problem(["python", "-m", "seakr_repro.no_such_module"])
    assert command_problem(["python", "-m", "seakr_repro", "bench", "contention", "--settings", "auto"]) is None
    assert command_problem(["python", "-m", "seakr_repro", "bench", "contention", "--no-such-flag"])
    assert command_problem(["python", "-m", "seakr_repro", "bench", "no-such-benchmark"])
    assert command_problem(["rm", "-rf", "results"])
    assert command_problem(["SEAKR_RESULTS_DIR=r", "python", "-m", "seakr_repro", "status"]) is None
    assert command_problem(["SEAKR_RESULTS_DIR=r", "python", "-m", "seakr_repro", "statu"])
    # placeholders: the command before them takes --help
    assert command_problem(["python", "-m", "seakr_repro", "bench", "NAME"]) is None
    assert command_problem(["python", "-m", "seakr_repro", "..."]) is None
    # a module of the package that exists but does not run as a program, and one that is gone
    assert command_problem(["python", "-m", "seakr_repro.benchmarks.decode", "--device", "cpu"]) == \
        "seakr_repro.benchmarks.decode does not run as a program (no __main__ guard)"
    assert command_problem(["python", "-m", "seakr_repro.tools.<module>"]) == "no module seakr_repro.tools"
    assert command_problem(["python", "-m", "seakr_repro.card_check.pack", "commit", "x"]) is None


def test_unknown_settings_are_reported():
    base, code = _base(), _code_namespaces()
    good = ("`seakr.mode`, `seakr.mode: fixed`, `model.vllm.allow_untested_version: true`, "
            "`--set retrieval.backend=bm25s`, `cache.vectors`")
    not_settings = ("`runs/runner.py`, `cli.py`, `seakr_repro.runs.disk_needs.estimate_needs(cfg)`, "
                    "`runs.grid.run_grid`, `torch.multinomial`, `LLM.collective_rpc`, `psgs_w100.tsv`, "
                    "`hotpot_train_v1.1.json`, `vllm==0.32.0`, `nq-test.qa.csv`")
    assert unknown_settings(good + " " + not_settings, base, code) == []
    bad = ("`seakr.moed`, `seakrr.mode: fixed`, `model.vllm.allow_untested`, `--set model.dtyp=float16`\n"
           "```bash\nmake reproduce  # `seakr.mode`\npython -m seakr_repro run --set seakr.mod=fixed\n```\n")
    assert unknown_settings(bad, base, code) == ["seakr.moed", "seakrr.mode", "model.vllm.allow_untested",
                                                 "model.dtyp", "seakr.mod"]


# ---------------------------------------------------------------- the record of runs (docs/measurements.md)

COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def run_tables(text):
    """(header cells, row cells) of each Markdown table whose first column is `run`."""
    tables, lines = [], prose(text).splitlines()
    for i, line in enumerate(lines[:-1]):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == "run" and re.match(r"^\|[-:| ]+\|$", lines[i + 1].strip()):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            tables.append((cells, rows))
    return tables


def record_problems(text):
    """Why a table of runs does not say, row by row, which code ran where and what it fed."""
    bad = []
    for header, rows in run_tables(text):
        cols = {name: next((i for i, h in enumerate(header) if name in h), None)
                for name in ("code", "machine", "fed")}
        if None in cols.values():
            bad.append(f"table {header}: no column {[n for n, i in cols.items() if i is None]}")
            continue
        for row in rows:
            if row[0].startswith("*template"):
                continue            # the format of the next row, not a run
            if len(row) != len(header):
                bad.append(f"row {row[0]!r}: {len(row)} cells, the header has {len(header)}")
                continue
            if not (COMMIT.search(row[cols["code"]]) or "not recorded" in row[cols["code"]]):
                bad.append(f"row {row[0]!r}: its code names no commit (nor says 'not recorded')")
            if not row[cols["machine"]] or not row[cols["fed"]]:
                bad.append(f"row {row[0]!r}: no machine or nothing it fed")
    return bad


def test_every_recorded_run_names_its_code_machine_and_use():
    text = (ROOT / "docs" / "measurements.md").read_text(encoding="utf-8")
    assert len(run_tables(text)) >= 4      # full default runs, one notebook, smoke runs, GPU runs
    assert record_problems(text) == []


def test_a_run_without_commit_or_use_is_reported():
    good = "| run | code | machine | what it fed |\n|---|---|---|---|\n| a | e823d0e | here | Table 7 |\n"
    assert record_problems(good) == []
    assert record_problems(good + "| b | today | here | Table 7 |\n") == [
        "row 'b': its code names no commit (nor says 'not recorded')"]
    assert record_problems(good + "| c | e823d0e | here | |\n") == ["row 'c': no machine or nothing it fed"]
    assert record_problems("| run | commit | machine |\n|---|---|---|\n| a | x | y |\n") == [
        "table ['run', 'commit', 'machine']: no column ['code', 'fed']"]


def test_readme_smoke_time_is_a_recorded_first_run():
    """The README's smoke time is a fresh clone's (issue 40): it names the commit of a recorded
    first run and links to what a first run pays."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    said = readme[readme.index("`make reproduce PROFILE=smoke`"):].split("([what a first run pays]")[0]
    assert "docs/measurements.md#what-a-first-run-pays" in readme
    text = (ROOT / "docs" / "measurements.md").read_text(encoding="utf-8")
    smoke = text[text.index("## Smoke runs"):text.index("### What a first run pays")]
    first = [row for _, rows in run_tables(smoke) for row in rows if row[0].startswith("first run")]
    assert first and COMMIT.search(first[0][2]).group(0) in COMMIT.findall(said)
