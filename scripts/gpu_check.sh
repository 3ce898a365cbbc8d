#!/usr/bin/env bash
# The GPU check (issue 25.5): on a machine with CUDA, set nimbus up against the machine's own torch (no
# downloads), run the `gpu` tests, the learner benchmarks (gpu_learners.py; learner_update.py per compile mode in
# LEARNER_COMPILE_MODES, default "off compile graphs") and the simulated-vs-real validation with the learner on
# cuda, and print a summary block for docs/benchmarks.md.
# Budget: under 8 minutes on one GPU, 10 with the compiled learner modes (their first update compiles).
# Without CUDA it checks the set-up, says "no CUDA: skipped" and exits 0.
#
#   scripts/gpu_check.sh            # PYTHON=python3 VENV=.venv-gpu SECONDS_PER_FIGURE=3 by default
#   WHEELS=dir scripts/gpu_check.sh # a machine without network: what is missing (or older than pyproject.toml asks)
#                                   # is installed from the wheels in dir (`pip download` them elsewhere)
#
# Set-up: a venv with --system-site-packages over $PYTHON (its torch, CUDA build included, is used as is),
# `pip install --no-deps --no-build-isolation -e .` into it; nimbus's other dependencies must already be
# importable: the missing ones are named, and installed from PyPI only when PyPI is reachable (the GPU
# machines lent here have no network). If the editable install cannot run, src/ is put on PYTHONPATH instead.
set -uo pipefail
cd "$(dirname "$0")/.."
START_S=$(date +%s)
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv-gpu}"
SECONDS_PER_FIGURE="${SECONDS_PER_FIGURE:-3}"
LOG_DIR="${LOG_DIR:-${TMPDIR:-/tmp}/nimbus-gpu-check}"   # logs, the benchmark's JSON
mkdir -p "$LOG_DIR"
say() { echo "gpu_check: $*"; }

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  say "$PYTHON cannot import torch; set PYTHON to the interpreter whose torch sees the GPU"; exit 2
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV" || { say "cannot make $VENV"; exit 2; }
PY="$VENV/bin/python"
# --system-site-packages sees the base interpreter's packages only; when $PYTHON is itself a venv (or conda env)
# its packages (torch first) are made visible by a .pth file, after the new venv's own
"$PYTHON" -c "import site; print('\n'.join(site.getsitepackages()))" \
  >"$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_nimbus_gpu_check_parent.pth"
if "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$LOG_DIR/pip.log" 2>&1; then
  say "nimbus installed editable in $VENV (no dependencies downloaded)"
else
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  say "editable install failed (see $LOG_DIR/pip.log); using PYTHONPATH=$PWD/src"
fi

# Which of nimbus's dependencies (and the test runner's) are missing here.
MISSING=$("$PY" - <<'EOF'
import importlib.metadata as md, re
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted = project["dependencies"] + extras["test"] + extras["mpe"]
def release(text):
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])
missing = []
for requirement in wanted:   # every requirement here is "name[extras]>=version" (packaging may be absent)
    name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
    floor = re.search(r">=\s*([\w.]+)", requirement)
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        missing.append(name)
        continue
    if floor and release(version) < release(floor.group(1)):
        missing.append(name)   # too old (tests/conftest.py needs pytest 9.2: it imports _pytest.nodeid)
print(" ".join(sorted(set(missing))))
EOF
)
if [ -n "$MISSING" ] && [ -n "${WHEELS:-}" ]; then
  say "installing what is missing or too old from $WHEELS (no index): $MISSING"
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" --upgrade $MISSING >>"$LOG_DIR/pip.log" 2>&1 \
    || say "not all of $MISSING are in $WHEELS (see $LOG_DIR/pip.log)"
elif [ -n "$MISSING" ]; then
  if "$PY" -c "import urllib.request as u; u.urlopen('https://pypi.org/simple/pip/', timeout=3)" 2>/dev/null; then
    say "installing what is missing from PyPI: $MISSING (torch and numpy held at the machine's versions)"
    "$PY" -c "import numpy, torch; print(f'torch=={torch.__version__}\nnumpy=={numpy.__version__}')" \
      >"$LOG_DIR/constraints.txt"
    "$PY" -m pip install -q -c "$LOG_DIR/constraints.txt" $MISSING >>"$LOG_DIR/pip.log" 2>&1 \
      || say "pip could not install: $MISSING"
  else
    say "missing and PyPI unreachable: $MISSING (tests that need them fail or skip)"
  fi
fi
"$PY" -c "import nimbus, pytest" 2>/dev/null || { say "nimbus or pytest does not import: $MISSING"; exit 2; }

DEVICE=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')")
TORCH=$("$PY" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda)")
if [ -z "$DEVICE" ]; then
  "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu >"$LOG_DIR/pytest.log" 2>&1
  say "no CUDA: skipped ($TORCH sees no GPU; $(tail -n 1 "$LOG_DIR/pytest.log"))"
  exit 0
fi

say "CUDA device: $DEVICE ($TORCH)"
timeout 330 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu -x --timeout 300 -rs >"$LOG_DIR/pytest.log" 2>&1
TESTS_RC=$?
tail -n 25 "$LOG_DIR/pytest.log"
timeout 150 "$PY" benchmarks/gpu_learners.py --seconds "$SECONDS_PER_FIGURE" \
  --out "$LOG_DIR/gpu_learners.json" >"$LOG_DIR/benchmark.md" 2>"$LOG_DIR/benchmark.err"
BENCH_RC=$?
# one learner update three ways (nimbus, a CleanRL-shaped reference loop, SB3's train()) on cuda, per compile mode
# (off: every case, SB3 too; compile and graphs: the two PPO shapes, whose first update includes the compilation)
LEARNER_RC=0
for MODE in ${LEARNER_COMPILE_MODES:-off compile graphs}; do
  if [ "$MODE" = off ]; then CASES_ARGS=(); else CASES_ARGS=(--cases ppo-cartpole ppo-mujoco-512 --no-sb3); fi
  timeout 200 "$PY" benchmarks/learner_update.py --device cuda --compile "$MODE" --repeats 3 --updates 3 \
    "${CASES_ARGS[@]}" --out "$LOG_DIR/learner_update_$MODE.json" >"$LOG_DIR/learner_update_$MODE.md" \
    2>"$LOG_DIR/learner_update_$MODE.err" || LEARNER_RC=$?
done
# issue 30's validation on a GPU machine: real PPO CartPole with the learner on cuda at 1, 2 and 4 actors, a
# profile fitted from the 1- and 2-actor runs, the same runs simulated from it (4 actors out of sample)
timeout 240 "$PY" benchmarks/simulated_vs_real.py --seeds 1 --env-steps 2048 --warmup 1 --learner-device cuda \
  --output "$LOG_DIR/simulated_vs_real.json" >"$LOG_DIR/simulated_vs_real.txt" 2>&1
SIM_RC=$?
ELAPSED_S=$(( $(date +%s) - START_S ))

echo
echo "----- paste into docs/benchmarks.md -----"
echo "GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'): $DEVICE, $TORCH, $(nproc) CPUs, ${ELAPSED_S} s"
echo "(\`scripts/gpu_check.sh\`, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'))."
echo
echo "gpu tests: $(tail -n 1 "$LOG_DIR/pytest.log") (exit $TESTS_RC)"
echo
if [ "$BENCH_RC" -eq 0 ]; then cat "$LOG_DIR/benchmark.md"; else echo "benchmark failed (exit $BENCH_RC): $(tail -n 3 "$LOG_DIR/benchmark.err")"; fi
echo
for MODE in ${LEARNER_COMPILE_MODES:-off compile graphs}; do
  echo "learner update on cuda, compile $MODE (\`benchmarks/learner_update.py --device cuda --compile $MODE --repeats 3 --updates 3\`):"
  cat "$LOG_DIR/learner_update_$MODE.md" 2>/dev/null; tail -n 2 "$LOG_DIR/learner_update_$MODE.err" 2>/dev/null
  echo
done
echo "simulated vs real, learner on cuda (\`benchmarks/simulated_vs_real.py --seeds 1 --env-steps 2048 --warmup 1 \
--learner-device cuda\`; simulated / real - 1), exit $SIM_RC:"
grep "actor(s):" "$LOG_DIR/simulated_vs_real.txt" || tail -n 3 "$LOG_DIR/simulated_vs_real.txt"
echo "-----------------------------------------"
[ "$TESTS_RC" -eq 0 ] && [ "$BENCH_RC" -eq 0 ] && [ "$SIM_RC" -eq 0 ] && [ "$LEARNER_RC" -eq 0 ]
