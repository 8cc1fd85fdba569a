# `make train` and `make test` set everything up on a fresh machine first (system GL libraries when root, a venv,
# pinned packages). REQUIREMENTS=requirements-gpu.txt on GPU pods; CONFIG=... and ARGS='--set k=v ...' for training.
PYTHON ?= python3
VENV ?= .venv
REQUIREMENTS ?= requirements.txt
CONFIG ?= configs/default.yaml
ARGS ?= --resume auto
PY := $(VENV)/bin/python
TOOLS_VENV ?= .tools-venv
LEROBOT_VENV ?= .lerobot-venv

.PHONY: setup train test lint tools lerobot gpu-check clean

setup: $(VENV)/.installed

$(VENV)/.installed: $(REQUIREMENTS) requirements.txt requirements-dev.txt requirements-warp.txt scripts/setup_system.sh
	bash scripts/setup_system.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r $(REQUIREMENTS) -r requirements-dev.txt -r requirements-warp.txt
	touch $@

train: setup
	$(PY) train_sac.py --config $(CONFIG) $(ARGS)

# Two workers, one file each at a time (module fixtures such as the smoke run and the S3 server are built once),
# one torch thread per process: the suite's processes fill both cores.
test: setup tools lerobot
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile tests

# On a CUDA machine: every CUDA path measured in one command (<= 20 min), report in docs/gpu/<gpu>.md. Without
# CUDA: GPU_CHECK_ARGS='--device cpu --quick'. A machine that limits commands to 10 minutes: --only updates variants
# envs, then --only smoke --smoke-minutes 8 (rows merge into the same report).
GPU_CHECK_ARGS ?=
gpu-check: setup
	$(PY) -m bench.gpu_check $(GPU_CHECK_ARGS)

# ruff's rules and line length live in pyproject.toml.
lint: setup
	$(PY) -m ruff check .

# Launcher-side tools (SkyPilot, W&B's sweep engine) in a venv of their own, for tests/test_cloud.py: not project
# dependencies, and SkyPilot alone brings ~100 packages (about 2 minutes to install here).
tools: $(TOOLS_VENV)/.installed

$(TOOLS_VENV)/.installed: requirements-tools.txt
	$(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-tools.txt
	touch $@

# The real LeRobot package in a venv of its own, for tests/test_lerobot.py (see requirements-lerobot.txt).
lerobot: $(LEROBOT_VENV)/.installed

$(LEROBOT_VENV)/.installed: requirements-lerobot.txt
	$(PYTHON) -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-lerobot.txt
	touch $@

clean:
	rm -rf $(VENV) $(TOOLS_VENV) $(LEROBOT_VENV) .pytest_cache
