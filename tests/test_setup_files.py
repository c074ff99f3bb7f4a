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
