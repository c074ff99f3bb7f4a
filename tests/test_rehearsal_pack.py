"""What the GPU rehearsal carries (scripts/gpu_rehearsal_pack.sh, seakr_repro/rehearsal/pack.py):
the size verdict on crafted sizes, the ray part's verdict without Ray, the check of a stripped Ray
tree, what a Ray tree stripped of the folders left out still imports, and (slow) the ray part on
CPU with those folders made unimportable in every process of the cluster."""
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
from seakr_repro.rehearsal import pack as rp
from seakr_repro.rehearsal.parts.env import pins
from seakr_repro.rehearsal.verdicts import ray_without_ray

MIB = 2**20


# ----------------------------------------------------------------------------- the size verdict

def test_everything_within_64_mib_is_carried():
    doc = rp.account({"rehearsal": 25 * MIB, "ray": 24 * MIB, "tracked": 4 * MIB, "untracked": 0})
    assert doc["ok"] and doc["ray_carried"] and doc["total"] == 53 * MIB and doc["limit"] == 64 * MIB
    assert "= 53.0 MiB, within the 64.0 MiB" in doc["why"]
    assert doc["lines"][1] == f"ray: {24 * MIB} bytes (24.0 MiB)"
    edge = rp.account({"rehearsal": 40 * MIB, "ray": 20 * MIB, "tracked": 4 * MIB})
    assert edge["ok"] and edge["total"] == rp.LIMIT                   # exactly the limit still goes


def test_over_64_mib_fails_or_leaves_ray_out_and_says_so_with_the_sizes():
    sizes = {"rehearsal": 25 * MIB, "ray": 36 * MIB, "tracked": 4 * MIB, "untracked": MIB}
    strict = rp.account(sizes, "1")
    assert not strict["ok"] and strict["ray_carried"]
    assert "ray 36.0 MiB" in strict["why"] and "over the 64.0 MiB one call carries by 2.0 MiB" in strict["why"]
    auto = rp.account(sizes, "auto")
    assert auto["ok"] and not auto["ray_carried"] and auto["total"] == 30 * MIB
    assert auto["why"].startswith("Ray left out: rehearsal 25.0 MiB + ray 36.0 MiB")
    assert "without Ray 30.0 MiB" in auto["why"]
    worse = rp.account({"rehearsal": 61 * MIB, "ray": 24 * MIB, "tracked": 4 * MIB}, "auto")
    assert not worse["ok"]                                  # without Ray it does not fit either
    none = rp.account({"rehearsal": 25 * MIB, "ray": None, "tracked": 4 * MIB})
    assert none["ok"] and not none["ray_carried"]


def test_bad_sizes_or_mode_are_refused():
    with pytest.raises(ValueError, match="whole bytes"):
        rp.account({"rehearsal": -1})
    with pytest.raises(ValueError, match="whole bytes"):
        rp.account({"rehearsal": 1.5})
    with pytest.raises(ValueError, match="RAY='yes'"):
        rp.account({"rehearsal": 1}, "yes")


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)                      # the size without the disk


def _account(pack: Path, mode: str, tree: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seakr_repro.rehearsal.pack", "account", str(pack),
                           "--tree", str(tree), "--untracked", "0", "--ray", mode],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


def test_the_account_command_writes_sizes_json_and_fails_or_drops_ray(tmp_path):
    for name, size in (("site.tar.xz", 30 * MIB), ("manifest.txt", 10), ("python-version", 5),
                       ("ray.tar.xz", 26 * MIB), ("ray-manifest.txt", 7)):
        _sparse(tmp_path / name, size)
    fits = _account(tmp_path, "1", 4 * MIB)
    assert fits.returncode == 0, fits.stderr
    doc = json.loads((tmp_path / "sizes.json").read_text())
    assert doc["sizes"] == {"rehearsal": 30 * MIB + 15, "ray": 26 * MIB + 7, "tracked": 4 * MIB, "untracked": 0}
    assert doc["ray_carried"] and f"rehearsal: {30 * MIB + 15} bytes" in fits.stdout
    (tmp_path / "sizes.json").unlink()
    over = _account(tmp_path, "1", 9 * MIB)
    assert over.returncode == 1 and "TOO LARGE for one call" in over.stderr and "RAY=auto" in over.stderr
    assert not (tmp_path / "sizes.json").exists() and (tmp_path / "ray.tar.xz").exists()
    auto = _account(tmp_path, "auto", 9 * MIB)
    assert auto.returncode == 0 and "Ray left out" in auto.stderr
    assert not (tmp_path / "ray.tar.xz").exists() and not (tmp_path / "ray-manifest.txt").exists()
    assert json.loads((tmp_path / "sizes.json").read_text())["ray_carried"] is False


# ----------------------------------------------------------------------------- the ray part without Ray

def test_ray_missing_is_not_run_only_where_it_could_not_travel():
    """The pack's size verdict, as the ray part quotes it when Ray does not import."""
    missing = {"ray_imports": False, "import_error": "No module named 'ray'"}
    none = ray_without_ray({**missing, "pack": "/x/.gpu-rehearsal", "pack_sizes": None})
    assert none[0] == "not run" and "no pack sizes at /x/.gpu-rehearsal/sizes.json" in none[1][0]
    left = rp.account({"rehearsal": 25 * MIB, "ray": 40 * MIB, "tracked": 4 * MIB}, "auto")
    status, why = ray_without_ray({**missing, "pack_sizes": left})
    assert status == "not run" and "Ray left out" in why[0] and "ray 40.0 MiB" in why[0]
    carried = rp.account({"rehearsal": 25 * MIB, "ray": 24 * MIB, "tracked": 4 * MIB})
    status, why = ray_without_ray({**missing, "import_error": "No module named 'jsonschema'", "pack_sizes": carried})
    assert status == "failed" and "carried Ray" in why[0] and "jsonschema" in why[0]


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


# what the ray part needs of Ray in its own process: the package, the modules `ray.init` starts a
# local cluster with, the Ray engine's driver and worker sides, and the part itself
RAY_PART_IMPORTS = ("ray", "ray._private.worker", "ray._private.node", "ray._private.services",
                    "ray._private.parameter", "ray.runtime_env", "ray.util", "ray.autoscaler",
                    "seakr_repro.runs.engine", "seakr_repro.runs.ray_worker", "seakr_repro.rehearsal.parts.ray")


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
    with, the Ray engine and the ray part all import from it, none of them needs a dropped folder
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
    script = (REPO_ROOT / "scripts" / "gpu_rehearsal_pack.sh").read_text()
    assert "rehearsal.pack ray-drops" in script and "rehearsal.pack check-ray" in script
    assert not [d for d in rp.RAY_DROPPED if f"/{d}" in script]          # no second list in the script
    for exe in rp.RAY_EXECUTABLES:                     # stripped, not deleted
        assert f"/ray/ray/{exe}" in script.replace('"$TMP"', "")


def test_the_ray_pack_carries_the_requirements_pin_and_what_the_machine_lacks():
    listed = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (REPO_ROOT / "scripts" / "gpu_rehearsal_ray.txt")
                             .read_text(), re.M))
    assert listed["ray"] == pins()["ray"]
    # Ray's own dependencies that the GPU image lacks (KINDS.md: click, filelock, msgpack,
    # packaging, protobuf, pyyaml, requests are there), and jsonschema's
    assert {"jsonschema", "jsonschema-specifications", "referencing", "rpds-py"} <= set(listed)


# ----------------------------------------------------------------------------- the ray part on CPU

BLOCKER = '''"""Makes the Ray folders the pack leaves out unimportable in every Python of the cluster."""
import os, sys
BLOCKED = {blocked!r}
with open({log!r}, "a") as f:
    f.write(f"{{os.getpid()}} loaded\\n")
class _Block:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            with open({log!r}, "a") as f:
                f.write(f"{{os.getpid()}} blocked {{name}}\\n")
            raise ModuleNotFoundError(f"No module named {{name!r}} (left out of the pack)", name=name)
        return None
sys.meta_path.insert(0, _Block())
'''


def _ray_part(tmp_path: Path, blocked: list[str], pack: Path, timeout: float) -> dict:
    """The ray part through the driver, with a sitecustomize that makes `blocked` unimportable in
    every Python started with this environment (the driver, the part, the raylet's workers)."""
    (tmp_path / "site").mkdir()
    blocker = BLOCKER.format(blocked=blocked, log=str(tmp_path / "blocker.log"))
    (tmp_path / "site" / "sitecustomize.py").write_text(blocker)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO_ROOT)]),
           "REHEARSAL_PACK": str(pack)}
    env.pop("SEAKR_OVERRIDES", None)
    proc = subprocess.run([sys.executable, "-m", "seakr_repro.rehearsal", "--out", str(tmp_path / "out"), "--work",
                           str(tmp_path / "work"), "--device", "cpu", "--parts", "ray", "--passages", "300",
                           "--budget", "900", "--part-seconds", "ray=850"],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads((tmp_path / "out" / "report.json").read_text())["parts"]["ray"]


@pytest.mark.slow
def test_the_ray_part_gives_the_local_rows_without_the_folders_left_out(tmp_path):
    """The part with the dropped folders blocked in the driver, the raylet's workers and agents
    (no time limit to speak of: this 2-core machine is slow to start a cluster)."""
    blocked = sorted(f"ray.{d}" for d in rp.RAY_DROPPED if "/" not in d and d != "jars")
    pack = tmp_path / "pack"
    pack.mkdir()
    r = _ray_part(tmp_path, blocked, pack, timeout=900)
    assert r["status"] == "ok", json.dumps(r, indent=1)[:3000]
    assert r["same_rows_as_local"] and r["differing_fields"] == {} and r["ray_rows"] == r["local_rows"] == 1
    assert r["llm_calls"] > 0 and r["tokens"] > 0                      # computed on the worker, not cached
    assert r["worker_resources"] == {"num_gpus": 0, "num_cpus": 2.0} and r["worker"]["gpus"] == []
    log = (tmp_path / "blocker.log").read_text()
    loaded = {line.split()[0] for line in log.splitlines() if line.endswith("loaded")}
    assert str(r["worker"]["pid"]) in loaded and len(loaded) >= 3      # the driver, the worker, Ray's agents
    assert " blocked " not in log                                      # nothing tried a dropped folder


def test_the_ray_part_without_ray_is_not_run_with_the_sizes(tmp_path):
    """No Ray importable (a meta path hook refuses it) and a pack whose sizes.json left Ray out."""
    pack = tmp_path / "pack"
    pack.mkdir()
    left = rp.account({"rehearsal": 25 * MIB, "ray": 40 * MIB, "tracked": 4 * MIB}, "auto")
    (pack / "sizes.json").write_text(json.dumps(left))
    r = _ray_part(tmp_path, ["ray"], pack, timeout=300)
    assert r["status"] == "not run" and "Ray left out" in r["why"][0] and r["pack_sizes"]["sizes"]["ray"] == 40 * MIB, r
    assert r["ray_imports"] is False and "left out of the pack" in r["import_error"]


def test_the_script_unpacks_ray_from_the_pack_and_a_carried_ray_that_breaks_fails(tmp_path):
    """scripts/gpu_rehearsal.sh unpacks ray.tar.xz beside site.tar.xz onto PYTHONPATH (ahead of the
    installed packages) and points the ray part at the pack's sizes.json: a carried Ray that does
    not import is a failure, not "not run"."""
    import tarfile

    pack = tmp_path / "pack"
    for name, files in (("site", {"rehearsal_marker.py": "X = 1\n"}),
                        ("ray", {"ray/__init__.py": "raise ImportError('the packed ray is broken')\n"})):
        src = tmp_path / name
        for rel, text in files.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text(text)
        pack.mkdir(exist_ok=True)
        with tarfile.open(pack / f"{name}.tar.xz", "w:xz") as tar:
            for rel in files:
                tar.add(src / rel, arcname=rel)
    (pack / "manifest.txt").write_text("marker==1\n")
    (pack / "ray-manifest.txt").write_text("ray==2.60.0\n")
    (pack / "python-version").write_text("%d.%d\n" % sys.version_info[:2])
    (pack / "sizes.json").write_text(json.dumps(rp.account({"rehearsal": 25 * MIB, "ray": 24 * MIB,
                                                            "tracked": 4 * MIB})))
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "PY": sys.executable, "PACK": str(pack),
           "REHEARSAL_ARGS": f"--parts ray --work {tmp_path / 'work'}"}
    env.pop("REHEARSAL_PACK", None)
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_rehearsal.sh"), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (out / "log.txt").read_text()
    assert f"unpacked {pack}/ray.tar.xz" in log and "2 packages from" in log, log
    r = json.loads((out / "report.json").read_text())["parts"]["ray"]
    assert r["status"] == "failed" and "the packed ray is broken" in r["why"][0], r
    assert r["pack_sizes"]["sizes"]["ray"] == 24 * MIB


def test_what_the_rehearsal_imports_is_on_the_image_or_in_the_pack_or_said_to_be_absent():
    """Each package the env part checks is on the lent machine's image (assumptions.IMAGE_PACKAGES),
    in one of the pack's lists, or one the rehearsal knows is absent there (assumptions.NOT_THERE)."""
    from seakr_repro.rehearsal import assumptions
    from seakr_repro.rehearsal.parts.env import DISTRIBUTIONS, PACKAGES

    norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()                   # noqa: E731
    packed = {norm(m) for f in ("gpu_rehearsal_packages.txt", "gpu_rehearsal_ray.txt")
              for m in re.findall(r"^([A-Za-z0-9_.-]+)==", (REPO_ROOT / "scripts" / f).read_text(), re.M)}
    there = {norm(n) for n in (*assumptions.IMAGE_PACKAGES, *assumptions.NOT_THERE)} | packed
    wanted = {norm(req or DISTRIBUTIONS.get(mod, mod)) for mod, req in PACKAGES.items()}
    assert wanted - there == set()
    assert not {norm(n) for n in assumptions.IMAGE_PACKAGES} & packed       # nothing packed that is there
