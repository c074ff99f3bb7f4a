"""The set-up files agree with each other: conda users and venv users get the same pins."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(path):
    out = []
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            out.append(line)
    return out


def test_environment_yml_matches_requirements():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert sorted(pip_section) == sorted(_pins("requirements.txt"))
    assert "requirements-nodeps.txt" in (ROOT / "environment.yml").read_text()


def test_torch_pinned_exactly_and_installed_first():
    pins = _pins("requirements.txt")
    assert "torch==2.13.0" in pins
    script = (ROOT / "scripts/setup_env.sh").read_text()
    assert script.index("torch==2.13.0") < script.index("-r requirements.txt")


def test_every_requirement_is_pinned():
    for pin in _pins("requirements.txt") + _pins("requirements-nodeps.txt"):
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][\w.]*", pin), pin


def test_ci_calls_the_readme_test_command():
    assert "make test" in (ROOT / ".ci/run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make reproduce" in readme


def test_makefile_has_documented_targets():
    text = (ROOT / "Makefile").read_text()
    for target in ("help", "setup", "reproduce", "test", "check", "bench", "lab", "clean"):
        assert re.search(rf"^{target}:.*## ", text, re.M), target


def test_virtual_environments_are_ignored_as_folders_and_as_links(tmp_path):
    """Both environments are often links to a shared disk: a folder-only pattern (`/.venv-vllm/`)
    lets `git status` list a linked one as untracked."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    target = tmp_path / "elsewhere"
    target.mkdir()
    for name in (".venv", ".venv-vllm"):
        (tmp_path / name).symlink_to(target, target_is_directory=True)
    names = [".venv", ".venv-vllm"]
    got = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", *names], capture_output=True, text=True)
    assert got.stdout.split() == names
    (tmp_path / ".venv").unlink()
    (tmp_path / ".venv-vllm").unlink()
    for name in names:          # the same names as real folders
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_text("")
    got = subprocess.run(["git", "-C", str(tmp_path), "check-ignore", *(f"{n}/x" for n in names)],
                         capture_output=True, text=True)
    assert len(got.stdout.split()) == 2
