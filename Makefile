# synapse: `make run` sets up and decodes the default model; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SYNAPSE := $(VENV)/bin/synapse
DEFAULT_MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
export NUMBA_CACHE_DIR := $(CURDIR)/.cache/numba

.PHONY: install models models-large run test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

models: install
	$(PY) -m synapse_cli.fetch --dest models

models-large: install
	$(PY) -m synapse_cli.fetch --dest models --only-large

run: install models
	$(SYNAPSE) decode -m $(DEFAULT_MODEL) -p "The capital of France is" -n 32

test: install models
	$(PY) -m pytest -q

bench: install models
	$(SYNAPSE) bench -m $(DEFAULT_MODEL)

clean:
	rm -rf $(VENV) .cache build *.egg-info
