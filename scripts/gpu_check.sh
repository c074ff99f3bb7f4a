#!/usr/bin/env bash
# The GPU evidence for this package in ONE call of the device tool (docs/measurements.md, "The card
# check", gives the call, its timeout_s and the plan: seakr_repro/card_check/plan.py):
#   bash scripts/gpu_check.sh $OUT        carrying .gpu-pack (make gpu-check-pack, here)
# the pack's wheels unpacked and compiled, then `check-card` (SeaKR first, under the paper
# profile's 24 GiB cap), then `pytest -m gpu`; writes OUT/check-card.json, OUT/gpu_pace.csv
# (the check's rows: commit them to data/measured/gpu_pace.csv), OUT/gpu-tests.txt, OUT/log.txt.
# The optional second call: WHAT=ray bash scripts/gpu_check.sh $OUT (the Ray engine's tests).
# Here, on CPU: DEVICE=cpu (the check over a simulated card; no GPU test runs).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
PACK=${PACK:-.gpu-pack}
WHAT=${WHAT:-check}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "[gpu-check] $*" | tee -a "$LOG"; }

SITE=""
if [ -f "$PACK/site.tar.xz" ]; then
    want=$(cat "$PACK/python-version")
    have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$want" = "$have" ]; then
        SITE=$(mktemp -d /tmp/seakr-gpu-site.XXXXXX)
        for archive in "$PACK"/site.tar.xz "$PACK"/ray.tar.xz; do    # ray.tar.xz: absent when RAY=auto left it out
            [ -f "$archive" ] && tar -xJf "$archive" -C "$SITE" && say "unpacked $archive"
        done
    else
        say "NOT using $PACK: it was packed for Python $want, $PY is $have"
    fi
fi
# bytecode for the machine's own Python, in parallel on every core (the pack carries none)
"$PY" -m compileall -q -j 0 ${SITE:+"$SITE"} seakr_repro > /dev/null 2>&1 || say "compileall: some files did not compile"
export PYTHONPATH="$PWD${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
say "device $DEVICE, python $("$PY" -c 'import sys; print(sys.version.split()[0])'), commit $(cat "$PACK/commit.json" 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["commit"])' 2>/dev/null || git rev-parse HEAD 2>/dev/null)"
rc=0
if [ "$WHAT" = ray ]; then
    "$PY" -m pytest -q -p no:cacheprovider tests/test_ray_engine.py 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
else
    "$PY" -m seakr_repro check-card --device "$DEVICE" --out "$OUT/check" --paces "$OUT/gpu_pace.csv" \
        ${CHECK_ARGS:-} 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    cp "$OUT/check/report.json" "$OUT/check-card.json" 2>/dev/null
    rm -rf "$OUT/check"
    if [ "$DEVICE" = cuda ]; then
        mods=$(grep -l 'pytest.mark.gpu\b' tests/test_*.py)
        # shellcheck disable=SC2086
        "$PY" -m pytest -q -m gpu -p no:cacheprovider $mods > "$OUT/gpu-tests.txt" 2>&1
        t=$?
        tail -3 "$OUT/gpu-tests.txt" | tee -a "$LOG"
        [ $t -ne 0 ] && rc=1
    fi
fi
[ -n "$SITE" ] && rm -rf "$SITE"
say "exit status $rc"
exit "$rc"
