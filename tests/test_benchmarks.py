"""The benchmarks' room: one module per benchmark behind one entry (`python -m seakr_repro bench
NAME`), and `make bench` / `make scale-check` calling that entry with options each benchmark
accepts."""
import contextlib
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from seakr_repro import cli
from seakr_repro.benchmarks import BENCHMARKS, benchmark, module_name

ROOT = Path(__file__).resolve().parent.parent
ROOM = ROOT / "seakr_repro" / "benchmarks"


def _present(name):
    return importlib.util.find_spec(module_name(name)) is not None


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_is_a_module_with_main_and_parser(name):
    module = benchmark(name)
    assert callable(module.main)
    assert module.parser().prog == f"python -m seakr_repro bench {name}"


def test_the_room_holds_benchmarks_only():
    modules = {p.stem for p in ROOM.glob("*.py")} - {"__init__"}
    assert modules == {module_name(n).rsplit(".", 1)[1] for n in BENCHMARKS if _present(n)}


def test_an_unknown_benchmark_is_refused_by_name():
    with pytest.raises(KeyError, match="no benchmark 'nope'"):
        benchmark("nope")
    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "nope"])
    assert exit_.value.code == 2 and "invalid choice" in err.getvalue()


def test_bench_help_lists_every_benchmark(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"^\s+{re.escape(n)}\s+{re.escape(what[:30])}", out, re.M) for n, what in BENCHMARKS.items())


def test_the_entry_hands_the_options_to_the_benchmark(monkeypatch):
    seen = []
    monkeypatch.setattr(benchmark("contention"), "main", lambda argv: seen.append(argv) or {})
    assert cli.main(["bench", "contention", "--repeats", "1", "--settings", "auto"]) == 0
    assert seen == [["--repeats", "1", "--settings", "auto"]]


def _make_recipe_commands(target: str) -> list[list[str]]:
    """argv of each `... -m seakr_repro bench ...` line of a make target's recipe, make variables
    replaced by sample values."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    out = []
    for line in recipe.splitlines():
        line = line.replace("$(PROFILE)", "default").replace("$(SCALE_CHECK_ARGS)", "")
        if "-m seakr_repro bench" in line:
            out.append(shlex.split(line[line.index("bench "):]))
    return out


@pytest.mark.parametrize("target", ["bench", "scale-check"])
def test_make_calls_the_entry_with_options_the_benchmarks_accept(target):
    commands = _make_recipe_commands(target)
    assert commands
    for argv in commands:
        args = cli.build_parser().parse_args(argv)
        assert args.name in BENCHMARKS
        parser = benchmark(args.name).parser()
        parser.allow_abbrev = False
        parser.parse_args(args.args)
    if target == "bench":
        assert [a[1] for a in commands] == ["contention", "ray-engine", "backends"]


def test_a_benchmark_runs_end_to_end_through_the_entry(tmp_path):
    """The contention benchmark at its smallest: two fresh processes timed, the report written."""
    out = tmp_path / "contention.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["bench", "contention", "--repeats", "1", "--seconds", "0.1", "--busy", "0",
                         "--settings", "unset", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["median_quiet_steps_per_s"]["unset"] > 0 and report["repeats"] == 1


def test_the_command_line_imports_no_benchmark_until_one_runs():
    """Building the parser (for `--help` or any command) imports the room's table only: a
    benchmark's module, its torch among others, loads when that benchmark runs."""
    code = ("import sys; from seakr_repro.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('seakr_repro.benchmarks.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"
