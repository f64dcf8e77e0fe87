# flemu: `make demo` and `make test` do all the set-up themselves on a fresh machine.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PIP     := $(BIN)/python -m pip
# torch is pinned through constraints.txt so that no CUDA wheels are pulled on a CPU machine
PIPFLAGS := --disable-pip-version-check -q -c constraints.txt

.PHONY: demo test setup docs bench study clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install $(PIPFLAGS) --upgrade pip
	$(PIP) install $(PIPFLAGS) -e '.[test,ray]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/flemu run scenarios/quickstart.yaml --out runs/quickstart
	$(BIN)/flemu plot runs/quickstart --out runs/quickstart/accuracy_vs_time.png

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests

clean:
	rm -rf runs .pytest_cache

docs: $(STAMP)
	$(BIN)/python -m emulator.docs --write

# the straggler and availability study (issue 7): two sweeps, then their reports
study: $(STAMP)
	$(BIN)/flemu sweep scenarios/studies/stragglers.yaml
	$(BIN)/flemu report runs/studies/stragglers
	$(BIN)/flemu sweep scenarios/studies/availability.yaml
	$(BIN)/flemu report runs/studies/availability
