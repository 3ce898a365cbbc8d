#!/usr/bin/env bash
# Create the virtual environment and install nimbus with every extra the tests use.
# torch is pinned first so pip takes the local CPU build instead of pulling CUDA wheels.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[mujoco,ray,redis,bench,test]"
echo "nimbus installed in $VENV"
