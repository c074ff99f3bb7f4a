"""What the GPU rehearsal carries to a lent GPU machine, and whether it fits one call.

scripts/gpu_rehearsal_pack.sh packs two archives into .gpu-rehearsal/: site.tar.xz (the packages
the rehearsal needs that the machine lacks) and ray.tar.xz (Ray, stripped to what a local
`ray.init` and the Ray engine need, with the dependencies of Ray the machine lacks). A device
call carries 64 MiB in all: the checkout's files (tracked, and untracked ones git does not
ignore) plus the carried paths. This module holds the one list of the Ray folders left out, the
check of a stripped Ray tree, and the size accounting, and writes .gpu-rehearsal/sizes.json,
which the rehearsal's ray part quotes when Ray is not there.

    python -m seakr_repro.tools.rehearsal_pack ray-drops           # the folders to delete
    python -m seakr_repro.tools.rehearsal_pack check-ray SITE      # a stripped tree still runs
    python -m seakr_repro.tools.rehearsal_pack account PACK --tree BYTES --untracked BYTES --ray MODE
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

LIMIT = 64 * 2**20          # what one device call carries: the checkout's files and the carried paths
MIB = 2**20

# Folders of the ray package that a local ray.init, its workers and runs/engine.py never import
# or run: Java workers' jars, the dashboard's web client (the dashboard is off; its agent stays),
# and the libraries on top of Ray Core. Measured for 2.60.0 (cp312, manylinux): the wheel is
# 79,321,593 bytes; without these folders and with the binaries stripped, ray.tar.xz is ~24.6 MB.
RAY_DROPPED = ("jars", "dashboard/client", "rllib", "data", "serve", "train", "tune", "llm")
# What must be there and executable after the stripping (ray.init starts these processes).
RAY_EXECUTABLES = ("core/src/ray/raylet/raylet", "core/src/ray/gcs/gcs_server")
# The archives of a pack, by component: what is carried (the manifests and python-version are
# counted with the rehearsal's packages).
REHEARSAL_FILES = ("site.tar.xz", "manifest.txt", "python-version")
RAY_FILES = ("ray.tar.xz", "ray-manifest.txt")
RAY_MODES = ("1", "auto")


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
    """The verdict on carrying `sizes` (bytes of "rehearsal", "ray", "tracked", "untracked";
    "ray" absent or None = no Ray was packed) in one call of `limit` bytes.

    ray_mode "1": everything must fit, else the pack fails. "auto": when everything does not fit
    but all but Ray does, Ray is left out and the verdict says so with the sizes (the ray part
    then reports "not run" with them). Returns {"sizes", "total", "limit", "ray_carried",
    "ok", "why", "lines"}; `total` is what is carried."""
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


def ray_not_there(error: str, pack_sizes: dict | None, pack: str) -> dict:
    """The ray part's verdict when `import ray` fails with `error` (`why` a list, as every verdict's):
    "not run" when the sizes say Ray could not travel (or no pack was carried: Ray was never
    offered), "failed" when the pack carried it (the packing is broken: Ray should have imported)."""
    if pack_sizes is None:
        return {"status": "not run",
                "why": [f"ray does not import here ({error}) and no pack sizes at {pack}/sizes.json: "
                        "no pack was carried (scripts/gpu_rehearsal_pack.sh makes one with Ray)"]}
    if not pack_sizes.get("ray_carried"):
        return {"status": "not run", "why": [f"ray does not import here ({error}); {pack_sizes.get('why')}"],
                "pack_sizes": pack_sizes.get("sizes")}
    return {"status": "failed", "error": f"the pack carried Ray ({pack_sizes.get('why')}) but it does "
                                         f"not import: {error}", "pack_sizes": pack_sizes.get("sizes")}


def read_sizes(pack: str | Path | None) -> dict | None:
    """The pack's sizes.json (what `account` decided), or None where no pack or no such file."""
    path = Path(pack) / "sizes.json" if pack else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


def _files_size(pack: Path, names) -> int | None:
    present = [pack / n for n in names if (pack / n).is_file()]
    return sum(p.stat().st_size for p in present) if present else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m seakr_repro.tools.rehearsal_pack",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("ray-drops", help="the ray/ folders the pack deletes, one a line")
    c = sub.add_parser("check-ray", help="check a stripped Ray under SITE")
    c.add_argument("site", type=Path)
    a = sub.add_parser("account", help="sizes of PACK and the checkout against one call's 64 MiB; "
                                       "writes PACK/sizes.json")
    a.add_argument("pack", type=Path)
    a.add_argument("--tree", type=int, required=True, help="bytes of the tracked files")
    a.add_argument("--untracked", type=int, default=0, help="bytes of untracked files git does not ignore")
    a.add_argument("--ray", default="1", choices=RAY_MODES)
    args = p.parse_args(argv)
    if args.cmd == "ray-drops":
        print("\n".join(RAY_DROPPED))
        return 0
    if args.cmd == "check-ray":
        problems = check_ray_tree(args.site)
        for line in problems:
            print(f"[pack] {line}", file=sys.stderr)
        return 1 if problems else 0
    sizes = {"rehearsal": _files_size(args.pack, REHEARSAL_FILES), "ray": _files_size(args.pack, RAY_FILES),
             "tracked": args.tree, "untracked": args.untracked}
    doc = account(sizes, args.ray)
    for line in doc["lines"]:
        print(f"[pack] {line}")
    if not doc["ok"]:
        print(f"[pack] TOO LARGE for one call: {doc['why']}. Fix: drop more of Ray "
              "(seakr_repro/tools/rehearsal_pack.py, RAY_DROPPED), or RAY=auto to carry the rest without "
              "Ray (the ray part then reports not run with these sizes)", file=sys.stderr)
        return 1
    if sizes["ray"] is not None and not doc["ray_carried"]:
        for name in RAY_FILES:
            (args.pack / name).unlink(missing_ok=True)
        print(f"[pack] {doc['why']} (RAY=auto)", file=sys.stderr)
    (args.pack / "sizes.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "lines"},
                                                     indent=1) + "\n")
    print(f"[pack] {doc['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
