"""What the GPU call (scripts/gpu_check.sh) carries to a lent GPU machine, whether it fits one
call, and which commit it describes.

scripts/gpu_check_pack.sh packs into .gpu-pack/ (git-ignored, named in the call's `carry`):
site.tar.xz (the packages the check needs that the machine lacks) and ray.tar.xz
(Ray, stripped to what a local `ray.init` and the Ray engine need, with the dependencies of Ray
the machine lacks). A call carries `CARRIED_MIB` in all: the checkout's files
(tracked, and untracked ones git does not ignore) plus the carried paths. This module holds the
one list of the Ray folders left out, the check of a stripped Ray tree, the size accounting
(PACK/sizes.json), and the commit the pack was
made at (PACK/commit.json: the commit and every tracked file's git blob id, so a checkout that
travelled without `.git` still names its commit, and the files that differ from it).

    python -m seakr_repro.card_check.pack ray-drops           # the folders to delete
    python -m seakr_repro.card_check.pack check-ray SITE      # a stripped tree still runs
    python -m seakr_repro.card_check.pack account PACK --tree BYTES --untracked BYTES --ray MODE
    python -m seakr_repro.card_check.pack commit PACK         # (again after a new commit: seconds)
    python -m seakr_repro.card_check.pack python              # the machine's Python (the wheels')
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from ..core.io import write_json
from ..core.paths import REPO_ROOT

MIB = 2**20
CARRIED_MIB = 64        # what one device call carries: the checkout's files and the carried paths
LIMIT = CARRIED_MIB * MIB
PYTHON = "3.12"         # the lent machine's python3, the one holding its torch: the wheels are for it

# Folders of the ray package that a local ray.init, its workers and runs/engine.py never import
# or run: Java workers' jars, the dashboard's web client (the dashboard is off; its agent stays),
# and the libraries on top of Ray Core (docs/measurements.md gives the sizes with and without them).
RAY_DROPPED = ("jars", "dashboard/client", "rllib", "data", "serve", "train", "tune", "llm")
# What must be there and executable after the stripping (ray.init starts these processes).
RAY_EXECUTABLES = ("core/src/ray/raylet/raylet", "core/src/ray/gcs/gcs_server")
# The archives of a pack, by component: what is carried (the manifests, python-version and
# commit.json are counted with the site's packages).
SITE_FILES = ("site.tar.xz", "manifest.txt", "python-version", "commit.json")
RAY_FILES = ("ray.tar.xz", "ray-manifest.txt")
RAY_MODES = ("1", "auto")
COMMIT_FILE = "commit.json"


def check_ray_tree(site: Path) -> list[str]:
    """What is wrong with a stripped Ray under `site` (empty: nothing): a dropped folder still
    there, or a binary ray.init starts missing or not executable, or the core module missing."""
    ray = Path(site) / "ray"
    problems = [f"{ray / d} is still there (RAY_DROPPED)" for d in RAY_DROPPED if (ray / d).exists()]
    for exe in RAY_EXECUTABLES:
        path = ray / exe
        if not path.is_file():
            problems.append(f"{path} is missing: ray.init starts it")
        elif not os.access(path, os.X_OK):
            problems.append(f"{path} is not executable (pack with tar, which keeps the mode)")
    if not list(ray.glob("_raylet*.so")):
        problems.append(f"{ray}/_raylet*.so is missing: `import ray` loads it")
    for needed in ("_private", "dashboard", "autoscaler", "runtime_env", "util"):
        if not (ray / needed).is_dir():
            problems.append(f"{ray / needed} is missing: a local ray.init imports it")
    return problems


def account(sizes: dict[str, int], ray_mode: str = "1", limit: int = LIMIT) -> dict:
    """The verdict on carrying `sizes` (bytes of "site", "ray", "tracked", "untracked";
    "ray" absent or None = no Ray was packed) in one call of `limit` bytes.

    ray_mode "1": everything must fit, else the pack fails. "auto": when everything does not fit
    but all but Ray does, Ray is left out and the verdict says so with the sizes. Returns {"sizes",
    "total", "limit", "ray_carried", "ok", "why", "lines"}; `total` is what is carried."""
    if ray_mode not in RAY_MODES:
        raise ValueError(f"RAY={ray_mode!r}: use 1 (Ray must fit) or auto (leave it out if it does not)")
    bad = {k: v for k, v in sizes.items() if v is not None and (not isinstance(v, int) or v < 0)}
    if bad:
        raise ValueError(f"sizes must be whole bytes >= 0, got {bad}")
    ray = sizes.get("ray")
    rest = sum(v for k, v in sizes.items() if k != "ray" and v)
    with_ray = rest + (ray or 0)
    mib = lambda n: f"{n / MIB:.1f} MiB"                                 # noqa: E731
    parts = " + ".join(f"{k} {mib(v)}" for k, v in sizes.items() if v is not None)
    doc = {"sizes": dict(sizes), "limit": limit, "ray_carried": ray is not None, "total": with_ray,
           "ok": True, "why": ""}
    if with_ray <= limit:
        doc["why"] = f"{parts} = {mib(with_ray)}, within the {mib(limit)} one call carries"
    elif ray is not None and rest <= limit and ray_mode == "auto":
        doc.update(ray_carried=False, total=rest,
                   why=f"Ray left out: {parts} = {mib(with_ray)}, over the {mib(limit)} one call "
                       f"carries by {mib(with_ray - limit)}; without Ray {mib(rest)}")
    else:
        doc.update(ok=False, why=f"{parts} = {mib(with_ray)}, over the {mib(limit)} one call carries "
                                 f"by {mib(with_ray - limit)}")
    doc["lines"] = [f"{k}: {v} bytes ({mib(v)})" for k, v in sizes.items() if v is not None] + \
                   [f"carried: {doc['total']} bytes ({mib(doc['total'])}) of {limit} ({mib(limit)})"]
    return doc


def read_sizes(pack: str | Path | None) -> dict | None:
    """The pack's sizes.json (what `account` decided), or None where no pack or no such file."""
    path = Path(pack) / "sizes.json" if pack else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


# ------------------------------------------------------------------ the commit it describes
def blob_id(path: Path) -> str:
    """git's blob id of a file's bytes (a link: of its target), as `git ls-tree` lists it."""
    data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_commit(pack: Path, root: Path = REPO_ROOT) -> dict:
    """PACK/commit.json: the checkout's HEAD and the blob id of every file of that commit."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout
    files = {}
    for line in git("ls-tree", "-r", "HEAD").splitlines():
        meta, _, path = line.partition("\t")
        mode, kind, blob = meta.split()
        if kind == "blob":
            files[path] = blob
    doc = {"commit": git("rev-parse", "HEAD").strip(), "files": files}
    write_json(Path(pack) / COMMIT_FILE, doc, indent=None)
    return doc


def tree_commit(pack: str | Path | None, root: Path = REPO_ROOT) -> dict | None:
    """{commit, changed: [files of that commit whose content here differs or is missing (the
    first 20)], changed_count} from the pack's commit.json; None where there is none."""
    path = Path(pack) / COMMIT_FILE if pack else None
    if path is None or not path.is_file():
        return None
    doc = json.loads(path.read_text())
    changed = [f for f, blob in sorted(doc["files"].items())
               if not ((root / f).exists() or (root / f).is_symlink()) or blob_id(root / f) != blob]
    return {"commit": doc["commit"], "changed": changed[:20], "changed_count": len(changed)}


def _files_size(pack: Path, names) -> int | None:
    present = [pack / n for n in names if (pack / n).is_file()]
    return sum(p.stat().st_size for p in present) if present else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m seakr_repro.card_check.pack", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ray-drops", help="the ray/ folders the pack deletes, one a line")
    c = sub.add_parser("check-ray", help="check a stripped Ray under SITE")
    c.add_argument("site", type=Path)
    a = sub.add_parser("account", help=f"sizes of PACK and the checkout against one call's {CARRIED_MIB} MiB; "
                                       "writes PACK/sizes.json")
    a.add_argument("pack", type=Path)
    a.add_argument("--tree", type=int, required=True, help="bytes of the tracked files")
    a.add_argument("--untracked", type=int, default=0, help="bytes of untracked files git does not ignore")
    a.add_argument("--ray", default="1", choices=RAY_MODES)
    m = sub.add_parser("commit", help="write PACK/commit.json: HEAD and its files' blob ids")
    m.add_argument("pack", type=Path)
    sub.add_parser("python", help="the lent machine's Python version (the wheels are made for it)")
    args = p.parse_args(argv)
    if args.cmd == "ray-drops":
        print("\n".join(RAY_DROPPED))
        return 0
    if args.cmd == "python":
        print(PYTHON)
        return 0
    if args.cmd == "commit":
        doc = write_commit(args.pack)
        print(f"[pack] {args.pack / COMMIT_FILE}: commit {doc['commit']}, {len(doc['files'])} files")
        return 0
    if args.cmd == "check-ray":
        problems = check_ray_tree(args.site)
        for line in problems:
            print(f"[pack] {line}", file=sys.stderr)
        return 1 if problems else 0
    sizes = {"site": _files_size(args.pack, SITE_FILES), "ray": _files_size(args.pack, RAY_FILES),
             "tracked": args.tree, "untracked": args.untracked}
    doc = account(sizes, args.ray)
    for line in doc["lines"]:
        print(f"[pack] {line}")
    if not doc["ok"]:
        print(f"[pack] TOO LARGE for one call: {doc['why']}. Fix: drop more of Ray "
              "(seakr_repro/card_check/pack.py, RAY_DROPPED), or RAY=auto to carry the rest without "
              "Ray (the optional Ray call then has none)", file=sys.stderr)
        return 1
    if sizes["ray"] is not None and not doc["ray_carried"]:
        for name in RAY_FILES:
            (args.pack / name).unlink(missing_ok=True)
        print(f"[pack] {doc['why']} (RAY=auto)", file=sys.stderr)
    write_json(args.pack / "sizes.json", {k: v for k, v in doc.items() if k != "lines"}, indent=1)
    print(f"[pack] {doc['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
