# One command each for the things a developer does. Everything runs from the project's own venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PLUGINS := $(wildcard envs/*/pyproject.toml)

.PHONY: install test lint demo bench clean

# Editable installs of the root package and every first-party plugin under envs/, with dev tools.
$(VENV)/.installed: pyproject.toml $(PLUGINS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' $(addprefix -e ,$(dir $(PLUGINS)))
	touch $@

install: $(VENV)/.installed

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy envhub envs tests

test: lint
	$(VENV)/bin/pytest

# The main job on the embedded default: a batch of episodes with the bundled oracle policy.
demo: install
	$(VENV)/bin/envhub rollout arithmetic --policy oracle --episodes 64 --concurrency 8
	$(VENV)/bin/envhub rollout guess-number --policy random:0 --episodes 64 --concurrency 8

bench: install
	$(PY) benchmarks/step_overhead.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
