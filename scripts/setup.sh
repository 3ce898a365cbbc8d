#!/usr/bin/env bash
# Create the virtual environment and install nimbus with every extra the tests use.
# torch is pinned first so pip takes the local CPU build instead of pulling CUDA wheels.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
# mpe2 needs pygame-ce; plain pygame (an older video extra) shares its module name, so drop it first.
"$VENV/bin/python" -m pip uninstall -q -y pygame 2>/dev/null || true
"$VENV/bin/python" -m pip install -q -e ".[mujoco,atari,ray,redis,bench,video,onnx,mpe,sweep,wandb,mlflow,test]"
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
echo "nimbus installed in $VENV"
