#!/usr/bin/env bash
# The GPU rehearsal in one call (docs/measurements.md, "GPU rehearsal"): writes OUT/report.json and
# OUT/log.txt. On a lent GPU machine: `bash scripts/gpu_rehearsal.sh $OUT` with `.gpu-rehearsal`
# carried (scripts/gpu_rehearsal_pack.sh made it here: the packages that machine lacks, Ray among them;
# the archives are unpacked into one folder on PYTHONPATH, which Ray's workers inherit).
# Here, on CPU: DEVICE=cpu bash scripts/gpu_rehearsal.sh OUT (tiny shapes; tests/test_gpu_rehearsal.py).
#   DEVICE     cuda (default) | cpu
#   PY         the Python to run (default: python3, the GPU machine's own, with its torch)
#   PACK       the folder the pack script filled (default .gpu-rehearsal; absent = use what is installed)
#   BUDGET     seconds for all parts (default 520: the whole call stays within 9 minutes)
#   REHEARSAL_ARGS  more arguments for seakr_repro.tools.gpu_rehearsal (e.g. --parts env,gpu_check)
set -uo pipefail
OUT=${1:?usage: scripts/gpu_rehearsal.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
PACK=${PACK:-.gpu-rehearsal}
BUDGET=${BUDGET:-520}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "[rehearsal] $*" | tee -a "$LOG"; }

SITE=""
if [ -f "$PACK/site.tar.xz" ]; then
    want=$(cat "$PACK/python-version")
    have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$want" = "$have" ]; then
        SITE=$(mktemp -d /tmp/seakr-rehearsal-site.XXXXXX)
        for archive in "$PACK"/site.tar.xz "$PACK"/ray.tar.xz; do    # ray.tar.xz: absent when RAY=auto left it out
            [ -f "$archive" ] && tar -xJf "$archive" -C "$SITE" && say "unpacked $archive into $SITE"
        done
        say "$(cat "$PACK"/manifest.txt "$PACK"/ray-manifest.txt 2>/dev/null | wc -l) packages from $PACK"
    else
        say "NOT using $PACK: it was packed for Python $want, $PY is $have"
    fi
fi
# the ray part quotes the pack's sizes.json when Ray is not there
[ -d "$PACK" ] && REHEARSAL_PACK=$(cd "$PACK" && pwd) && export REHEARSAL_PACK
export PYTHONPATH="$PWD${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
say "device $DEVICE, python $("$PY" -c 'import sys; print(sys.version.split()[0])'), budget ${BUDGET} s"
# shellcheck disable=SC2086
timeout $((${BUDGET%.*} + 30)) "$PY" -m seakr_repro.tools.gpu_rehearsal --out "$OUT" --device "$DEVICE" \
    --budget "$BUDGET" ${REHEARSAL_ARGS:-} 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
[ -n "$SITE" ] && rm -rf "$SITE"
say "exit status $rc; report $OUT/report.json"
exit "$rc"
