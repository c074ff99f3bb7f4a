"""The command line: every sub-command has --help; bad input ends in one paragraph, exit 2."""
import subprocess
import sys

import pytest

from seakr_repro.cli import build_parser


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "seakr_repro", *args], capture_output=True,
                          text=True, timeout=120, **kw)


def test_every_subcommand_has_help():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"corpus", "prepare", "index", "search", "reproduce", "datasets", "preflight",
            "status", "render"} <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([name, "--help"])
        assert exit_.value.code == 0


def test_bad_tsv_gives_one_paragraph_without_traceback(tmp_path):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n1\tgood passage\tT\n2\tbroken line\n")
    res = run_cli("corpus", "--source", "dpr", "--tsv", str(tsv), "--out", str(tmp_path / "c.jsonl"),
                  "--quiet")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("error: ") and "line 3" in res.stderr and "Fix:" in res.stderr
    assert not (tmp_path / "c.jsonl").exists()


def test_an_error_paragraph_breaks_lines_only_between_words():
    """A path or a command in an error (the lock's holder names its whole command) is copied from
    the terminal: the paragraph must not cut it at a hyphen or inside a long word."""
    import io

    from seakr_repro.core.errors import UserError, report_and_exit

    path = "/tmp/pytest-of-someone/run-with-a-long-name/results/paper-tiny/reproduce.lock"
    command = ("SEAKR_RESULTS_DIR=/tmp/pytest-of-someone/run-with-a-long-name/results .venv/bin/python "
               "-m seakr_repro reproduce --profile paper-tiny --set model.path=/x/" + "y" * 120)
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        report_and_exit(UserError(f"another run is running ({command})", path=path, fix="wait"), out)
    assert exit_.value.code == 2
    text = out.getvalue()
    assert text.startswith("error: ") and len(text.splitlines()) > 1
    words = text.split()
    assert path + ":" in words and "model.path=/x/" + "y" * 120 + ")." in words
    assert " ".join(words[1:]) == UserError(f"another run is running ({command})", path=path,
                                            fix="wait").paragraph()


def test_an_error_paragraph_names_paths_inside_the_repository_relative_to_it(monkeypatch, tmp_path):
    """Notebooks show error paragraphs to readers of another clone: a file inside the repository is
    named as they find it in theirs (results/...), one outside it (a download) stays absolute, and
    so does a path that merely contains the root's text."""
    from seakr_repro.core import paths
    from seakr_repro.core.errors import UserError

    root = tmp_path / "clone"
    (root / "params").mkdir(parents=True)
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    outside = f"/data{root}/raw/x.jsonl"
    err = UserError(f"{root}/results/paper/runs/a.jsonl is cut short; {outside} is missing",
                    path=root / "params" / "paper.yaml", line=3,
                    fix=f"delete {root}/results/paper/runs/a.jsonl, or cd {root} and run again")
    text = err.paragraph()
    assert text.startswith("In file params/paper.yaml, line 3: results/paper/runs/a.jsonl is cut short")
    assert f"{outside} is missing" in text and f"cd {root} and" in text
    assert "delete results/paper/runs/a.jsonl," in text and text.count(str(root) + "/") == 1   # the outside one
    assert UserError("gone", path=tmp_path / "raw.tsv").paragraph() == f"In file {tmp_path}/raw.tsv: gone."


def test_unknown_profile_is_explained():
    res = run_cli("prepare", "--profile", "nonexistent", "--quiet")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "nonexistent.yaml" in res.stderr and "default" in res.stderr


def test_bad_override_names_the_setting():
    res = run_cli("prepare", "--set", "nokey", "--quiet")
    assert res.returncode == 2 and "nokey" in res.stderr


def test_an_unknown_setting_is_refused_before_anything_runs():
    res = run_cli("datasets", "--set", "no.such.key=1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no.such.key" in res.stderr and "base.yaml" in res.stderr


def test_datasets_shows_the_profile_its_overrides_and_prepared_sizes(tmp_path):
    import os

    data = tmp_path / "smoke" / "data"
    data.mkdir(parents=True)
    (data / "bundled-single.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n')
    env = {**os.environ, "SEAKR_RESULTS_DIR": str(tmp_path)}
    res = run_cli("datasets", "--profile", "smoke", env=env)
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line for line in res.stdout.splitlines()[2:]}
    assert "sample of 3 questions" in res.stdout
    assert set(rows) == {"bundled-2wiki", "bundled-hotpotqa", "bundled-single"}
    assert rows["bundled-single"].split()[-2:] == ["3", "-"] and "evaluated" in rows["bundled-single"]
    res = run_cli("datasets", "--profile", "smoke", "--set", "datasets.simple=[nq]", env=env)
    rows = {line.split()[0]: line for line in res.stdout.splitlines()[2:] if line.strip()}
    assert "nq" in rows and "missing" in rows["nq"] and "training split of nq" in rows["nq-train"]
    assert "bundled-single" not in rows


def test_run_asking_for_more_questions_than_prepared_says_how_to_get_more(tmp_path):
    import os

    env = {**os.environ, "SEAKR_RESULTS_DIR": str(tmp_path)}
    res = run_cli("run", "--profile", "smoke", "--method", "cot", "--dataset", "bundled-single",
                  "-n", "6", "--quiet", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    text = " ".join(res.stderr.split())
    assert "prepared 3" in text and "datasets.n_questions=6" in text


def test_reproduce_passes_the_cell_timeout_and_preflight_switch(monkeypatch):
    """--cell-timeout reaches the pipeline as a run setting (not an override: stamps unchanged)."""
    from seakr_repro import pipeline
    from seakr_repro.cli import main
    seen = {}
    monkeypatch.setattr(pipeline, "reproduce", lambda profile, **kw: seen.update(kw) or [])
    assert main(["reproduce", "--profile", "smoke", "--cell-timeout", "90", "--no-preflight"]) == 0
    assert seen["cell_timeout"] == 90 and seen["preflight"] is False and seen["overrides"] == {}
    assert main(["reproduce", "--profile", "smoke"]) == 0
    assert seen["cell_timeout"] is None and seen["preflight"] is True   # the profile's setting
