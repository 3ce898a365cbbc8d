#!/usr/bin/env bash
# Create the virtual environment and install nimbus with every extra the tests use.
# torch is pinned first so pip takes the local CPU build instead of pulling CUDA wheels.
# --no-compile: pip byte-compiles every module it installs (torch, ray, mlflow ...: 50 of the 95 s this took); the
# modules nimbus and its tests import are compiled once at the end instead, by importing them.
# nimbus and its extras go in with uv (from PyPI, like pip): it downloads and unpacks in parallel, 7 s where pip took
# 47-57 s for the same ~180 packages on the 2-core machine. torch stays pinned by a constraint, so no extra can pull
# a CUDA build (uv does not read pip's configuration); where uv fails to install, pip does the same install.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --no-compile --upgrade pip uv
"$VENV/bin/python" -m pip install -q --no-compile "torch==2.13.0"
# mpe2 needs pygame-ce; plain pygame (an older video extra) shares its module name, so drop it first.
"$VENV/bin/python" -m pip uninstall -q -y pygame 2>/dev/null || true
EXTRAS="mujoco,atari,envpool,ray,redis,bench,video,onnx,mpe,sweep,wandb,mlflow,test,lint"
PIN="$(mktemp)"
trap 'rm -f "$PIN"' EXIT
echo "torch==2.13.0" > "$PIN"
"$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --constraint "$PIN" -e ".[$EXTRAS]" \
  || "$VENV/bin/python" -m pip install -q --no-compile -e ".[$EXTRAS]"
# The `redis` tests start a real redis-server on loopback (Debian's package). Install it when missing,
# if we may (root, or passwordless sudo); otherwise say so: those tests then skip with this reason.
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq redis-server) \
      || echo "setup: could not install redis-server; the redis tests will be skipped" >&2
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && command -v apt-get >/dev/null 2>&1; then
    (sudo -n apt-get update -qq && sudo -n apt-get install -y -qq redis-server) \
      || echo "setup: could not install redis-server; the redis tests will be skipped" >&2
  else
    echo "setup: redis-server is missing and installing it needs root (apt-get install -y redis-server);" \
         "the redis tests will be skipped" >&2
  fi
fi
# Bytecode for what runs import (written even where PYTHONDONTWRITEBYTECODE is set): every interpreter a run or
# a test starts would otherwise compile torch again. Two importers side by side: torch's side, everything else.
warm() {
  PYTHONDONTWRITEBYTECODE= PYGAME_HIDE_SUPPORT_PROMPT=1 "$VENV/bin/python" - "$@" >/dev/null 2>&1 <<'PY'
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:   # an extra that failed to install: its tests say so
        pass
PY
}
warm torch nimbus.cli nimbus.run.loop gymnasium torch.utils.tensorboard stable_baselines3 mujoco pettingzoo mpe2 &
warm scipy.stats sklearn.decomposition sklearn.neighbors sklearn.cluster matplotlib.pyplot ray redis optuna onnx \
  onnxruntime moviepy pygame hypothesis pytest xdist &
wait
echo "nimbus installed in $VENV"
