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


def test_unknown_profile_is_explained():
    res = run_cli("prepare", "--profile", "nonexistent", "--quiet")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "nonexistent.yaml" in res.stderr and "default" in res.stderr


def test_bad_override_names_the_setting():
    res = run_cli("prepare", "--set", "nokey", "--quiet")
    assert res.returncode == 2 and "nokey" in res.stderr


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
