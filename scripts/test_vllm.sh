#!/usr/bin/env bash
# `make test-vllm` (and CI): the vLLM backend's tests in the vLLM environment, failing loudly where
# `make test` would skip quietly. Usage: scripts/test_vllm.sh PYTHON [pytest args...]
#   - vLLM must import in PYTHON's environment (the tests skip themselves otherwise: a green run
#     that tested nothing);
#   - pytest's exit 5 (no test collected) is a failure with its own message, not a pass.
set -uo pipefail
PY=${1:?usage: scripts/test_vllm.sh PYTHON [pytest args...]}
shift
cd "$(dirname "$0")/.." || exit 1
TESTS=(tests/test_vllm_backend.py tests/test_vllm_plumbing.py)
why=$("$PY" -c "from seakr_repro.llm.vllm.backend import vllm_available; print(vllm_available() or '')") || {
  echo "[test-vllm] error: $PY cannot import seakr_repro. Fix: rm -r .venv-vllm && make setup-vllm" >&2
  exit 1
}
if [ -n "$why" ]; then
  echo "[test-vllm] error: vLLM does not import with $PY ($why): its tests would all be skipped." \
       "Fix: rm -r .venv-vllm && make setup-vllm" >&2
  exit 1
fi
"$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test-vllm] error: pytest collected no test from ${TESTS[*]} (exit 5): nothing was checked" >&2
fi
exit "$rc"
