"""What the GPU call carries (scripts/gpu_check_pack.sh, seakr_repro/card_check/pack.py): the size
verdict on crafted sizes, the check of a stripped Ray tree, what a Ray tree stripped of the folders
left out still imports."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from seakr_repro.core.paths import REPO_ROOT
from seakr_repro.card_check import pack as rp

MIB = 2**20


# ----------------------------------------------------------------------------- the size verdict

def test_everything_within_64_mib_is_carried():
    doc = rp.account({"site": 25 * MIB, "ray": 24 * MIB, "tracked": 4 * MIB, "untracked": 0})
    assert doc["ok"] and doc["ray_carried"] and doc["total"] == 53 * MIB and doc["limit"] == 64 * MIB
    assert "= 53.0 MiB, within the 64.0 MiB" in doc["why"]
    assert doc["lines"][1] == f"ray: {24 * MIB} bytes (24.0 MiB)"
    edge = rp.account({"site": 40 * MIB, "ray": 20 * MIB, "tracked": 4 * MIB})
    assert edge["ok"] and edge["total"] == rp.LIMIT                   # exactly the limit still goes


def test_over_64_mib_fails_or_leaves_ray_out_and_says_so_with_the_sizes():
    sizes = {"site": 25 * MIB, "ray": 36 * MIB, "tracked": 4 * MIB, "untracked": MIB}
    strict = rp.account(sizes, "1")
    assert not strict["ok"] and strict["ray_carried"]
    assert "ray 36.0 MiB" in strict["why"] and "over the 64.0 MiB one call carries by 2.0 MiB" in strict["why"]
    auto = rp.account(sizes, "auto")
    assert auto["ok"] and not auto["ray_carried"] and auto["total"] == 30 * MIB
    assert auto["why"].startswith("Ray left out: site 25.0 MiB + ray 36.0 MiB")
    assert "without Ray 30.0 MiB" in auto["why"]
    worse = rp.account({"site": 61 * MIB, "ray": 24 * MIB, "tracked": 4 * MIB}, "auto")
    assert not worse["ok"]                                  # without Ray it does not fit either
    none = rp.account({"site": 25 * MIB, "ray": None, "tracked": 4 * MIB})
    assert none["ok"] and not none["ray_carried"]


def test_bad_sizes_or_mode_are_refused():
    with pytest.raises(ValueError, match="whole bytes"):
        rp.account({"site": -1})
    with pytest.raises(ValueError, match="whole bytes"):
        rp.account({"site": 1.5})
    with pytest.raises(ValueError, match="RAY='yes'"):
        rp.account({"site": 1}, "yes")


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)                      # the size without the disk


def _account(pack: Path, mode: str, tree: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seakr_repro.card_check.pack", "account", str(pack),
                           "--tree", str(tree), "--untracked", "0", "--ray", mode],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


def test_the_account_command_writes_sizes_json_and_fails_or_drops_ray(tmp_path):
    for name, size in (("site.tar.xz", 30 * MIB), ("manifest.txt", 10), ("python-version", 5),
                       ("ray.tar.xz", 26 * MIB), ("ray-manifest.txt", 7)):
        _sparse(tmp_path / name, size)
    fits = _account(tmp_path, "1", 4 * MIB)
    assert fits.returncode == 0, fits.stderr
    doc = json.loads((tmp_path / "sizes.json").read_text())
    assert doc["sizes"] == {"site": 30 * MIB + 15, "ray": 26 * MIB + 7, "tracked": 4 * MIB, "untracked": 0}
    assert doc["ray_carried"] and f"site: {30 * MIB + 15} bytes" in fits.stdout
    (tmp_path / "sizes.json").unlink()
    over = _account(tmp_path, "1", 9 * MIB)
    assert over.returncode == 1 and "TOO LARGE for one call" in over.stderr and "RAY=auto" in over.stderr
    assert not (tmp_path / "sizes.json").exists() and (tmp_path / "ray.tar.xz").exists()
    auto = _account(tmp_path, "auto", 9 * MIB)
    assert auto.returncode == 0 and "Ray left out" in auto.stderr
    assert not (tmp_path / "ray.tar.xz").exists() and not (tmp_path / "ray-manifest.txt").exists()
    assert json.loads((tmp_path / "sizes.json").read_text())["ray_carried"] is False


def test_read_sizes(tmp_path):
    assert rp.read_sizes(None) is None and rp.read_sizes(tmp_path) is None
    (tmp_path / "sizes.json").write_text('{"ray_carried": true}')
    assert rp.read_sizes(str(tmp_path)) == {"ray_carried": True}


# ----------------------------------------------------------------------------- the stripped Ray

def _ray_tree(root: Path) -> Path:
    ray = root / "ray"
    for d in ("_private", "dashboard/modules", "autoscaler", "runtime_env", "util", "core/src/ray/raylet",
              "core/src/ray/gcs"):
        (ray / d).mkdir(parents=True)
    (ray / "_raylet.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    for exe in rp.RAY_EXECUTABLES:
        (ray / exe).write_bytes(b"\x7fELF")
        (ray / exe).chmod(0o755)
    return ray


def test_a_stripped_ray_tree_is_checked(tmp_path):
    ray = _ray_tree(tmp_path)
    assert rp.check_ray_tree(tmp_path) == []
    (ray / "rllib").mkdir()
    raylet = ray / "core/src/ray/raylet/raylet"
    raylet.chmod(raylet.stat().st_mode & ~(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    (ray / "_raylet.cpython-312-x86_64-linux-gnu.so").unlink()
    (ray / "dashboard").rename(ray / "gone")
    problems = rp.check_ray_tree(tmp_path)
    assert len(problems) == 4, problems
    assert any("rllib is still there" in p for p in problems) and any("not executable" in p for p in problems)
    assert any("_raylet*.so is missing" in p for p in problems) and any("dashboard is missing" in p for p in problems)


# what the Ray engine needs of Ray in a process: the package, the modules `ray.init` starts a
# local cluster with, the Ray engine's driver and worker sides
RAY_PART_IMPORTS = ("ray", "ray._private.worker", "ray._private.node", "ray._private.services",
                    "ray._private.parameter", "ray.runtime_env", "ray.util", "ray.autoscaler",
                    "seakr_repro.runs.engine", "seakr_repro.runs.ray_worker")


def _stripped_ray(installed: Path, root: Path) -> Path:
    """A Ray tree as the pack leaves it: the installed package, less RAY_DROPPED (links to the rest)."""
    def mirror(src: Path, dst: Path, rel: str) -> None:
        dst.mkdir(parents=True)
        for entry in src.iterdir():
            sub = f"{rel}/{entry.name}".lstrip("/")
            if sub in rp.RAY_DROPPED:
                continue
            if any(d.startswith(sub + "/") for d in rp.RAY_DROPPED):      # a folder partly dropped
                mirror(entry, dst / entry.name, sub)
            else:
                (dst / entry.name).symlink_to(entry)
    mirror(installed, root / "ray", "")
    return root


def test_the_stripped_ray_tree_still_imports_what_the_ray_part_uses(tmp_path):
    """Ray without the folders the pack leaves out: `import ray`, what ray.init starts a cluster
    with and the Ray engine all import from it, none of them needs a dropped folder
    (any import of one fails there), and every folder the list names is one the wheel has."""
    ray = pytest.importorskip("ray")
    installed = Path(ray.__file__).parent
    assert [d for d in rp.RAY_DROPPED if not (installed / d).is_dir()] == []       # real folders of the wheel
    site = _stripped_ray(installed, tmp_path / "site")
    assert rp.check_ray_tree(site) == []
    code = ("import importlib, json, sys\n"
            f"for m in {RAY_PART_IMPORTS!r}: importlib.import_module(m)\n"
            "print(json.dumps([sys.modules['ray'].__file__, sorted(m for m in sys.modules if m.startswith('ray.'))]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)]),
                               "RAY_USAGE_STATS_ENABLED": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ray_file, loaded = json.loads(proc.stdout.splitlines()[-1])
    assert ray_file.startswith(str(site))                                   # the stripped tree, not the installed one
    dropped = [m for m in loaded for d in rp.RAY_DROPPED if m == f"ray.{d.replace('/', '.')}"
               or m.startswith(f"ray.{d.replace('/', '.')}.")]
    assert dropped == [] and "ray._private.node" in loaded


def test_the_script_uses_the_one_list_and_strips_what_it_keeps():
    script = (REPO_ROOT / "scripts" / "gpu_check_pack.sh").read_text()
    assert "card_check.pack ray-drops" in script and "card_check.pack check-ray" in script
    assert not [d for d in rp.RAY_DROPPED if f"/{d}" in script]          # no second list in the script
    for exe in rp.RAY_EXECUTABLES:                     # stripped, not deleted
        assert f"/ray/ray/{exe}" in script.replace('"$TMP"', "")


def test_the_ray_pack_carries_the_requirements_pin_and_what_the_machine_lacks():
    listed = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO_ROOT / "scripts" / "gpu_check_ray.txt")
                             .read_text(), re.M))
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO_ROOT / "requirements.txt").read_text(), re.M))
    assert listed["ray"] == pins["ray"]
    # Ray's own dependencies that the GPU image lacks (KINDS.md: click, filelock, msgpack,
    # packaging, protobuf, pyyaml, requests are there), and jsonschema's
    assert {"jsonschema", "jsonschema-specifications", "referencing", "rpds-py"} <= set(listed)
