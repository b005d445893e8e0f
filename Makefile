# agentsim: `make run` sets everything up and runs the default scenario; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/agentsim run scenarios/coding-agents.yaml --out runs/coding-agents --force

# The whole suite, slow tests included (CI calls this through .ci/run).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# Everything but tests marked slow.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache
