# Two commands do everything on a fresh machine:
#   make demo   install into .venv and run the main job on the embedded default model
#   make test   install the test extras and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
NLQO := $(VENV)/bin/nlqo

.PHONY: demo test install install-test clean-venv

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[embedder]"
	touch $@

install: $(VENV)/.base

$(VENV)/.test: $(VENV)/.base scripts/install-llama-server.sh
	$(PY) -m pip install --quiet -e ".[test]"
	$(NLQO) models install smollm2-135m
	sh scripts/install-llama-server.sh $(PY)
	command -v dot >/dev/null 2>&1 || (apt-get install -y -qq graphviz >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq graphviz >/dev/null 2>&1)) || echo "graphviz not installed: DOT render checks will be skipped"
	touch $@

install-test: $(VENV)/.test

demo: install
	$(NLQO) plan examples/counterparts.nlqo

test: install-test
	$(PY) -m pytest -q

clean-venv:
	rm -rf $(VENV)
