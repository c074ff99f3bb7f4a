"""Provenance's git record: a run rewriting its own tables and figures is not a dirty checkout."""
import subprocess

from seakr_repro.core import provenance


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_dirty_means_the_code_differs_not_the_run_s_outputs(tmp_path, monkeypatch):
    (tmp_path / "tables").mkdir()
    (tmp_path / "figures").mkdir()
    for name in ("tables/t1.md", "figures/f.png", "code.py"):
        (tmp_path / name).write_text("a\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "x")
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)

    clean = provenance.git_revision()
    assert clean["dirty"] is False and len(clean["revision"]) == 40 and clean["changed"] == []
    (tmp_path / "tables/t1.md").write_text("b\n")          # what a run writes
    (tmp_path / "figures/f.png").write_text("b\n")
    (tmp_path / "new.py").write_text("untracked\n")
    assert provenance.git_revision()["dirty"] is False
    (tmp_path / "code.py").write_text("b\n")               # a change to what made it
    got = provenance.git_revision()
    assert got["dirty"] is True and got["changed"] == ["code.py"]


def test_outside_a_git_checkout_the_revision_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    got = provenance.git_revision()
    assert got["revision"] == "unknown" and got["dirty"] is False
