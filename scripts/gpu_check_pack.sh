#!/usr/bin/env bash
# Pack what the card check and the GPU tests need and the GPU machine lacks into .gpu-pack/ (git-ignored),
# to be named in the device tool's `carry`:
#   site.tar.xz       the packages of scripts/gpu_check_packages.txt: wheels for PYVER (default
#                     the GPU machine's, seakr_repro/card_check/pack.py) and manylinux x86_64, installed into one folder, their
#                     compiled modules stripped of debug symbols, tests and C sources left out
#   ray.tar.xz        Ray and the dependencies of it the machine lacks (scripts/gpu_check_ray.txt),
#                     without the folders seakr_repro/card_check/pack.py's RAY_DROPPED names,
#                     _raylet.so, raylet and gcs_server stripped (they stay executable)
#   manifest.txt, ray-manifest.txt   the packages and versions inside each
#   python-version    PYVER (scripts/gpu_check.sh unpacks the archives only for that Python)
#   commit.json       the checkout's commit and its files' blob ids (the report names that commit
#                     where .git does not travel; after a new commit, refresh it in seconds:
#                     python -m seakr_repro.card_check.pack commit .gpu-pack)
#   sizes.json        each component's size and the verdict 
# Prints each component's size and fails when the archives and the checkout's files (tracked, and
# untracked ones git does not ignore) exceed what a call carries (seakr_repro/card_check/pack.py).
# RAY=auto instead leaves Ray out when only Ray does not fit, and sizes.json says so (the optional Ray call
# then reports not run).
# Needs pip, strip (binutils), tar and xz; runs here, never on the GPU machine (no network there).
# Takes minutes (two xz archives of ~100 MB each).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=${PACK:-.gpu-pack}
PY=${PY:-.venv/bin/python}
PYVER=${PYVER:-$($PY -m seakr_repro.card_check.pack python)}
PIP=${PIP:-$PY -m pip}
RAY=${RAY:-1}
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
           --platform any"
FOR="--only-binary=:all: --python-version $PYVER --implementation cp $PLATFORMS"
TMP=$(mktemp -d /tmp/seakr-gpu-pack.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mib() { echo "$(($1 / 1024 / 1024)) MiB ($1 bytes)"; }

# unpack REQUIREMENTS into TMP/NAME: wheels for the GPU machine, installed into one folder, the
# compiled code stripped, what nothing runs (C sources, stubs, bytecode, console scripts) left out;
# bytecode is made for one Python version and this Python is not the machine's, so the call
# compiles it for the machine's own at its start (scripts/gpu_check.sh, counted in card_check/plan.py);
# prints the manifest (NAME==VERSION a line), its progress goes to stderr
site() {
    local reqs=$1 name=$2
    echo "[pack] $name: downloading the wheels of $reqs for Python $PYVER, manylinux x86_64 ..." >&2
    # shellcheck disable=SC2086
    $PIP download -q --no-deps $FOR -d "$TMP/$name-wheels" -r "$reqs"
    echo "[pack] $name: $(ls "$TMP/$name-wheels" | wc -l) wheels, $(mib "$(du -cb "$TMP/$name-wheels"/*.whl | tail -1 | cut -f1)")" >&2
    # shellcheck disable=SC2086
    $PIP install -q --no-index --no-deps --no-compile $FOR --target "$TMP/$name" "$TMP/$name-wheels"/*.whl
    find "$TMP/$name" -name "*.so" -exec strip --strip-unneeded {} +
    find "$TMP/$name" \( -name "*.pyx" -o -name "*.pxd" -o -name "*.pyi" -o -name "*.cpp" -o -name "*.c" \
         -o -name "*.h" -o -name "__pycache__" \) -prune -exec rm -rf {} +
    rm -rf "$TMP/$name/bin"
    (cd "$TMP/$name-wheels" && ls *.whl | sed -E 's/^([^-]+)-([^-]+)-.*/\1==\2/')
}
archive() {    # archive TMP/NAME as PACK/FILE
    local name=$1 file=$2
    echo "[pack] $name: $(mib "$(du -sb "$TMP/$name" | cut -f1)") unpacked; compressing into $PACK/$file ..."
    tar -C "$TMP/$name" -cf - . | xz -6 -T0 > "$PACK/$file"
    echo "[pack] $name: $PACK/$file $(mib "$(stat -c %s "$PACK/$file")")"
}

mkdir -p "$PACK"
rm -f "$PACK"/{site.tar.xz,ray.tar.xz,manifest.txt,ray-manifest.txt,sizes.json,commit.json}

site scripts/gpu_check_packages.txt site > "$TMP/manifest.txt"
rm -rf "$TMP"/site/{spacy,thinc,blis,srsly}/tests
archive site site.tar.xz
cp "$TMP/manifest.txt" "$PACK/manifest.txt"

site scripts/gpu_check_ray.txt ray > "$TMP/ray-manifest.txt"
strip --strip-unneeded "$TMP"/ray/ray/core/src/ray/raylet/raylet "$TMP"/ray/ray/core/src/ray/gcs/gcs_server
for d in $($PY -m seakr_repro.card_check.pack ray-drops); do
    rm -rf "${TMP:?}/ray/ray/$d"
done
$PY -m seakr_repro.card_check.pack check-ray "$TMP/ray"
archive ray ray.tar.xz
cp "$TMP/ray-manifest.txt" "$PACK/ray-manifest.txt"
echo "$PYVER" > "$PACK/python-version"
$PY -m seakr_repro.card_check.pack commit "$PACK"

# what the device tool carries besides: the tracked files and the untracked ones git does not ignore
tree=$(git ls-files -z | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
untracked=$(git ls-files -z --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
$PY -m seakr_repro.card_check.pack account "$PACK" --tree "${tree:-0}" --untracked "${untracked:-0}" --ray "$RAY"
