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

# two xdist workers x one torch thread each on a 2-core machine (tests/conftest.py sets the
# threads of every worker and of the subprocesses tests start; OMP_NUM_THREADS here covers
# imports that happen before conftest)
test: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 tests

# property-based scenarios (issue 16, tests/test_fuzz.py): FUZZ_EXAMPLES drawn scenarios per
# property (default 500: about 1,500 runs and 1,000 malformed files, 15-20 min on 2 cores), with
# hypothesis's example database in .hypothesis/fuzz, so a failure found is replayed first next time
FUZZ_EXAMPLES ?= 500
.PHONY: fuzz
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_DB=.hypothesis/fuzz \
	  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 \
	  tests/test_fuzz.py --hypothesis-show-statistics

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

# benchmarks (issues 5, 19): P1 floor / peers, P2, P3, P4, async -> benchmarks/results/bench.json
# (about 25 min; BENCH_FLAGS=--quick for a few). Each peer goes into its own venv (never into
# .venv), with the CPU build of torch: Flower 1.41 (the newest whose dependencies install
# here; it brings its own Ray) and pfl-research 0.6. A peer that cannot be installed is
# recorded as skipped with the reason.
FLWR_VENV := benchmarks/results/tmp_flower_venv
# the emulation peers (issue 29; `make bench BENCH_FLAGS="--only emulation"` for their table alone):
# APPFL 1.12 (appfl.vsim) and FLGo 0.4.4 (flgo.simulator), each in its own venv with the CPU torch.
# The index's torchvision is a CUDA build that fails to import beside torch 2.13; APPFL reaches it
# only through piq (import time), so the APPFL venv gets benchmarks/peer_shims/torchvision instead.
APPFL_VENV := benchmarks/results/tmp_appfl_venv
FLGO_VENV := benchmarks/results/tmp_flgo_venv
PFL_VENV  := benchmarks/results/tmp_pfl_venv
bench: $(STAMP)
	@test -f $(FLWR_VENV)/.flwr-1.41.0 || { $(PY) -m venv $(FLWR_VENV) && \
	  $(FLWR_VENV)/bin/python -m pip install --disable-pip-version-check -q 'flwr[simulation]==1.41.0' torch==2.13.0 pydantic && touch $(FLWR_VENV)/.flwr-1.41.0; } || \
	  echo "Flower could not be installed: its P1 rows will be skipped"
	@test -f $(PFL_VENV)/.installed || { $(PY) -m venv $(PFL_VENV) && \
	  $(PFL_VENV)/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt 'pfl[pytorch]==0.6.0' torch==2.13.0 pydantic && \
	  touch $(PFL_VENV)/.installed; } || echo "pfl-research could not be installed: its P1 row will be skipped"
	@test -f $(APPFL_VENV)/.installed || { $(PY) -m venv $(APPFL_VENV) && \
	  $(APPFL_VENV)/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt 'appfl==1.12.*' torch==2.13.0 pydantic && \
	  { $(APPFL_VENV)/bin/python -m pip uninstall -q -y torchvision; \
	    cp -r benchmarks/peer_shims/torchvision "$$($(APPFL_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"; } && \
	  touch $(APPFL_VENV)/.installed; } || echo "APPFL could not be installed: its emulation-peer rows will be skipped"
	@test -f $(FLGO_VENV)/.installed || { $(PY) -m venv $(FLGO_VENV) && \
	  $(FLGO_VENV)/bin/python -m pip install --disable-pip-version-check -q -c constraints.txt 'flgo==0.4.4' torch==2.13.0 pydantic && \
	  touch $(FLGO_VENV)/.installed; } || echo "FLGo could not be installed: its emulation-peer rows will be skipped"
	$(BIN)/python -m benchmarks.run --flower-python $(FLWR_VENV)/bin/python --pfl-python $(PFL_VENV)/bin/python \
	  --appfl-python $(APPFL_VENV)/bin/python --flgo-python $(FLGO_VENV)/bin/python $(BENCH_FLAGS)
