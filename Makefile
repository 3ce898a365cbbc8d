# nimbus — two commands:  `make run` (set up + train PPO on CartPole)  and  `make test` (set up + tests).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh $(VENV)
	touch $(STAMP)

run: setup
	$(VENV)/bin/nimbus train configs/ppo-cartpole.yaml

# pytest-xdist: TEST_WORKERS processes share the tests (many wait on workers, timeouts and sleeps rather than the
# CPU); `--dist loadgroup` keeps each xdist_group on one worker (tests/conftest.py: the ray tests, a module's shared
# trained run). `make test TEST_WORKERS=0` runs them in one process.
TEST_WORKERS ?= 2
test test-fast: export PYTEST_ADDOPTS := $(PYTEST_ADDOPTS) -n $(TEST_WORKERS) --dist loadgroup
# Bytecode caches on while testing, whatever the environment says (PYTHONDONTWRITEBYTECODE=1 on this machine): without
# them each xdist worker rewrites every test module and every interpreter a test starts (CLI runs, spawned and Ray
# workers) compiles nimbus again. Collecting the suite: 17 s without, 8 s with (docs/guide.md).
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test: setup
	$(VENV)/bin/python -m pytest -q

test-fast: setup
	$(VENV)/bin/python -m pytest -q -m "not slow"

clean:
	rm -rf runs .pytest_cache
