#!/usr/bin/env bash
# Pack what the GPU rehearsal needs and the GPU machine lacks (scripts/gpu_rehearsal_packages.txt)
# into .gpu-rehearsal/ (git-ignored), to be named in the device tool's `carry`:
#   site.tar.xz     the wheels for PYVER (default 3.12, the GPU machine's) and manylinux x86_64,
#                   installed into one folder, their compiled modules stripped of debug symbols
#                   and their tests and C sources left out (the wheels alone are ~73 MB; this ~25 MB)
#   python-version  PYVER (scripts/gpu_rehearsal.sh unpacks the site only for that Python)
#   manifest.txt    the packages and versions inside
# Fails when the pack and the tracked files together exceed the 64 MiB a call carries.
# Needs pip, strip (binutils), tar and xz; runs here, never on the GPU machine (no network there).
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
PACK=${PACK:-.gpu-rehearsal}
PIP=${PIP:-.venv/bin/python -m pip}
LIMIT=$((64 * 1024 * 1024))
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
           --platform any"
FOR="--only-binary=:all: --python-version $PYVER --implementation cp $PLATFORMS"
TMP=$(mktemp -d /tmp/seakr-rehearsal-pack.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

echo "[pack] downloading the wheels for Python $PYVER, manylinux x86_64 ..."
# shellcheck disable=SC2086
$PIP download -q --no-deps $FOR -d "$TMP/wheels" -r scripts/gpu_rehearsal_packages.txt
wheels=$(du -cb "$TMP"/wheels/*.whl | tail -1 | cut -f1)
echo "[pack] $(ls "$TMP"/wheels | wc -l) wheels, $((wheels / 1024 / 1024)) MiB"
# shellcheck disable=SC2086
$PIP install -q --no-index --no-deps --no-compile $FOR --target "$TMP/site" "$TMP"/wheels/*.whl
find "$TMP/site" -name "*.so" -exec strip --strip-unneeded {} +
find "$TMP/site" \( -name "*.pyx" -o -name "*.pxd" -o -name "*.pyi" -o -name "*.cpp" -o -name "*.c" \
     -o -name "*.h" -o -name "__pycache__" \) -prune -exec rm -rf {} +
rm -rf "$TMP"/site/{spacy,thinc,blis,srsly}/tests "$TMP/site/bin"
mkdir -p "$PACK"
rm -f "$PACK/site.tar.xz"
tar -C "$TMP/site" -cf - . | xz -6 -T0 > "$PACK/site.tar.xz"
echo "$PYVER" > "$PACK/python-version"
(cd "$TMP/wheels" && ls *.whl | sed -E 's/^([^-]+)-([^-]+)-.*/\1==\2/') > "$PACK/manifest.txt"
packed=$(du -cb "$PACK"/* | tail -1 | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo "[pack] $PACK: $((packed / 1024 / 1024)) MiB ($(wc -l < "$PACK/manifest.txt") packages); tracked files" \
     "$((tree / 1024 / 1024)) MiB; together $(((packed + tree) / 1024 / 1024)) of 64 MiB"
if [ $((packed + tree)) -gt $LIMIT ]; then
    echo "[pack] too large for one call's 64 MiB" >&2
    exit 1
fi
