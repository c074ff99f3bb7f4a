#!/usr/bin/env bash
# The GPU rehearsal (docs/measurements.md, "GPU rehearsal"): writes OUT/report.json and OUT/log.txt.
# On a lent GPU machine it is ONE call of the device tool (the exact call, with its timeout_s and
# the plan's arithmetic, stands at the top of that section):
#   bash scripts/gpu_rehearsal.sh $OUT          carrying .gpu-rehearsal (make gpu-rehearsal-pack, here)
# every part of the one call in order (seakr_repro/rehearsal/plan.py), each under a 24 GiB cap, the
# paper profile's card; the report's "next_call" is a second call for what the first could not reach:
#   REHEARSAL_ARGS="<next_call's REHEARSAL_ARGS>" bash scripts/gpu_rehearsal.sh $OUT
# then, here: python -m seakr_repro.rehearsal --out OUT --merge A/report.json B/report.json
# Exit status: 1 when a part is not ok, 2 when none failed but one was skipped for time, else 0.
# Here, on CPU: DEVICE=cpu bash scripts/gpu_rehearsal.sh OUT (tiny shapes; tests/test_gpu_rehearsal.py).
#   DEVICE     cuda (default) | cpu
#   PY         the Python to run (default: python3, the GPU machine's own, with its torch)
#   PACK       the folder the pack script filled (default .gpu-rehearsal; absent = use what is installed)
#   REHEARSAL_ARGS  more arguments for python -m seakr_repro.rehearsal, e.g.
#              --parts env,gpu_check       the parts to run (default: the one call's)
#              --budget 480                seconds for all parts (default: the plan's)
#              --memory-cap-gib 24|none    each part's GPU memory cap (default 24)
#              --part-seconds methods=300  a part's own limit
#              --paper-sets 2wiki --paper-questions 3       seakr_paper's sets and most questions per set
#              --methods cot,dragin --methods-profile paper  the methods part's methods and sizes
set -uo pipefail
OUT=${1:?usage: scripts/gpu_rehearsal.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
PY=${PY:-python3}
PACK=${PACK:-.gpu-rehearsal}
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
# Bytecode for the machine's own Python, once, before the first part, in parallel on every core:
# the pack carries none (bytecode is made for one Python version, and no Python 3.12 is at hand
# where the pack is made), and without it each part's process would compile what it imports.
# plan.py counts it in each call's time (plan.compile_seconds).
t0=$(date +%s%N)
"$PY" -m compileall -q -j 0 ${SITE:+"$SITE"} seakr_repro > /dev/null 2>&1 || say "compileall: some files did not compile"
say "bytecode compiled for $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') in $(( ($(date +%s%N) - t0) / 1000000 )) ms: ${SITE:+$SITE and }seakr_repro"
# the ray part quotes the pack's sizes.json when Ray is not there; the report's commit comes from the
# pack's commit.json where .git did not travel
[ -d "$PACK" ] && REHEARSAL_PACK=$(cd "$PACK" && pwd) && export REHEARSAL_PACK
export PYTHONPATH="$PWD${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
say "device $DEVICE, python $("$PY" -c 'import sys; print(sys.version.split()[0])')"
# shellcheck disable=SC2086
"$PY" -m seakr_repro.rehearsal --out "$OUT" --device "$DEVICE" ${REHEARSAL_ARGS:-} 2>&1 | tee -a "$LOG"
rc=${PIPESTATUS[0]}
[ -n "$SITE" ] && rm -rf "$SITE"
say "exit status $rc; report $OUT/report.json"
exit "$rc"
