#!/usr/bin/env bash
# The GPU rehearsal (docs/measurements.md, "GPU rehearsal"): writes OUT/report.json and OUT/log.txt,
# and exits 1 when any part is not ok (a part "not run" on that machine aside; the report's
# "summary" lists each). On a lent GPU machine, with `.gpu-rehearsal` carried
# (scripts/gpu_rehearsal_pack.sh made it here: the packages that machine lacks, Ray among them; the
# archives are unpacked into one folder on PYTHONPATH, which Ray's workers inherit), in four calls of
# at most 600 s (each part under a 24 GiB cap, the paper profile's card):
#   1. REHEARSAL_ARGS="--parts env,gpu_tests,gpu_check,methods,oom,ray" bash scripts/gpu_rehearsal.sh $OUT
#   2. REHEARSAL_ARGS="--parts seakr_paper --paper-sets 2wiki" bash scripts/gpu_rehearsal.sh $OUT
#   3. REHEARSAL_ARGS="--parts seakr_paper --paper-sets hotpotqa" bash scripts/gpu_rehearsal.sh $OUT
#   4. REHEARSAL_ARGS="--parts env,decode_bench" bash scripts/gpu_rehearsal.sh $OUT   (issue 39's decode paths)
# (no REHEARSAL_ARGS: every part in one call, seakr_paper last with the time left: not its 3 per set).
# Then, here: python -m seakr_repro.tools.gpu_rehearsal --out OUT --merge OUT1/report.json OUT2/report.json ...
# (one report of the calls, one commit and cap, its summary decided again).
# Here, on CPU: DEVICE=cpu bash scripts/gpu_rehearsal.sh OUT (tiny shapes; tests/test_gpu_rehearsal.py).
#   DEVICE     cuda (default) | cpu
#   PY         the Python to run (default: python3, the GPU machine's own, with its torch)
#   PACK       the folder the pack script filled (default .gpu-rehearsal; absent = use what is installed)
#   BUDGET     seconds for all parts (default 540: the whole call stays within 600 s)
#   REHEARSAL_ARGS  more arguments for seakr_repro.tools.gpu_rehearsal, e.g.
#              --parts env,gpu_check       the parts to run
#              --memory-cap-gib 24|none    each part's GPU memory cap (default 24)
#              --part-seconds seakr_paper=540,methods=330   a part's own limit
#              --paper-sets 2wiki --paper-questions 3       seakr_paper's sets and questions per set
#              --methods cot,dragin --methods-profile paper  the methods part's methods and sizes
set -uo pipefail
OUT=${1:?usage: scripts/gpu_rehearsal.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
PACK=${PACK:-.gpu-rehearsal}
BUDGET=${BUDGET:-540}
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
