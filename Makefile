# `make train` and `make test` set everything up on a fresh machine first (system GL libraries when root, a venv,
# pinned packages). REQUIREMENTS=requirements-gpu.txt on GPU pods; CONFIG=... and ARGS='--set k=v ...' for training.
PYTHON ?= python3
VENV ?= .venv
REQUIREMENTS ?= requirements.txt
CONFIG ?= configs/default.yaml
ARGS ?= --resume auto
PY := $(VENV)/bin/python

.PHONY: setup train test clean

setup: $(VENV)/.installed

$(VENV)/.installed: $(REQUIREMENTS) requirements.txt requirements-dev.txt scripts/setup_system.sh
	bash scripts/setup_system.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r $(REQUIREMENTS) -r requirements-dev.txt
	touch $@

train: setup
	$(PY) train_sac.py --config $(CONFIG) $(ARGS)

test: setup
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) .pytest_cache
