# flemu: `make demo` and `make test` do all the set-up themselves on a fresh machine.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PIP     := $(BIN)/python -m pip
# torch is pinned through constraints.txt so that no CUDA wheels are pulled on a CPU machine
PIPFLAGS := --disable-pip-version-check -q -c constraints.txt

.PHONY: demo test test-slow test-all setup docs docs-check bench study study-selection study-compression clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install $(PIPFLAGS) --upgrade pip
	$(PIP) install $(PIPFLAGS) -e '.[test,ray,tracking,docs]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/flemu run scenarios/quickstart.yaml --out runs/quickstart
	$(BIN)/flemu plot runs/quickstart --out runs/quickstart/accuracy_vs_time.png

# two xdist workers x one torch thread each on a 2-core machine (tests/conftest.py sets the
# threads of every worker and of the subprocesses tests start; OMP_NUM_THREADS here covers
# imports that happen before conftest).
# `make test` is the everyday suite (about two minutes): every test but the ~75 marked
# `@pytest.mark.slow` (Ray instances, killed and resumed sweeps, subprocess replays, paper
# reproductions over many runs: each several seconds, together about two thirds of the
# suite's time). `make test-slow` runs those; `make test-all` runs both in one call; CI
# (.ci/run) runs `make test` and then `make test-slow`, so nothing goes unchecked.
PYTEST := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2
test: $(STAMP)
	$(PYTEST) -m "not slow" tests

test-slow: $(STAMP)
	$(PYTEST) -m slow tests

test-all: $(STAMP)
	$(PYTEST) tests

# the golden check (issue 34): about 55 small scenarios across protocols, engines, executors,
# device models and the paper families; every file of their run directories (less wall-clock
# columns) is compared with the hashes in tests/golden/hashes.json (about 30 s on 2 cores).
# A change that shifts them is recorded with `make golden-update REASON="..."`, which rewrites
# the hashes and adds the reason and the shifted cases to docs/changelog.md. GOLDEN=case...
# picks cases (tests/golden/golden.py list).
GOLDEN ?=
.PHONY: golden golden-update
golden: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m tests.golden.golden check $(GOLDEN)
golden-update: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m tests.golden.golden update --reason "$(REASON)" $(GOLDEN)

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
	rm -rf runs .pytest_cache site site-check

# the docs site (MkDocs + Material + mkdocstrings): regenerate the Scenario reference page
# from the registry and the CLI reference from the CLI, lint every page's Markdown (pymarkdown:
# lists and tables that Python-Markdown would render as run-on text; CONTRIBUTING.md, "Writing
# docs"), then build every page in strict mode (a broken link fails) into site/
docs: $(STAMP)
	$(BIN)/python -m emulator.docs --write
	$(BIN)/python docs/tools/cli_reference.py --write
	$(BIN)/python docs/tools/lint_docs.py
	$(BIN)/python -m mkdocs build --strict --site-dir site

# open every page of the built site and a report in headless Chromium (Debian: apt-get install
# chromium) and screenshot them at 1280 x 900 into site-check/; prints each page's width and
# what overflows its text column (a code line, table or formula behind a scroll bar, or past
# the column's edge), and fails if anything does (about 5 min on 2 cores)
docs-check: docs
	$(BIN)/python docs/tools/browser_check.py --out site-check

# the straggler and availability study (issue 7): two sweeps, their reports, then the tables
# and figures of docs/studies.md from the sweep folders (each table stamped with its commit)
study: $(STAMP)
	$(BIN)/flemu sweep scenarios/studies/stragglers.yaml
	$(BIN)/flemu report runs/studies/stragglers
	$(BIN)/flemu sweep scenarios/studies/availability.yaml
	$(BIN)/flemu report runs/studies/availability
	$(BIN)/python docs/studies_results.py

# results that regenerate (issue 39; docs/results.md): results/manifest.yaml lists every number
# and figure a docs page shows that runs produced, with its commands, quick variant and outputs.
# `make results` re-runs the full commands (hours; outside CI; benchmarks and mutation scores are
# listed, not re-run: `make bench`, `make mutate`); RESULTS="a b" picks some.
# `make results-check` re-runs every quick variant (about 2 min on 2 cores; in CI) and compares its
# numbers with results/quick/NAME.json: it fails, naming the number, its drift and the
# tolerance, when one moved beyond its seeds' spread (with a small floor). After a change that
# moves results on purpose, `make results-record` stores the new quick numbers (say why in
# docs/changelog.md).
RESULTS ?=
.PHONY: results results-check results-record
results: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m analysis.results full $(RESULTS)
results-check: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m analysis.results check $(RESULTS)
results-record: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m analysis.results record $(RESULTS)

# the client-selection study (issue 35; docs/selection-study.md, about 15 min on 2 cores): the
# sweep, its report, then the page's table, headlines and figures from the sweep folder
study-selection: $(STAMP)
	$(BIN)/flemu sweep scenarios/studies/selection.yaml -j 2
	$(BIN)/flemu report runs/studies/selection
	$(BIN)/python docs/selection_results.py runs/studies/selection

# the compression and privacy study (issue 38; docs/studies/compression.md, about 15-20 min on
# 2 cores): the codec sweep and the DP sweep, their reports, then the page's tables and figures
study-compression: $(STAMP)
	$(BIN)/flemu sweep scenarios/studies/compression.yaml -j 2
	$(BIN)/flemu report runs/studies/compression
	$(BIN)/flemu sweep scenarios/studies/compression_dp.yaml -j 2
	$(BIN)/flemu report runs/studies/compression_dp
	$(BIN)/python docs/compression_results.py runs/studies/compression runs/studies/compression_dp

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
	$(BIN)/python -m benchmarks.state_memory --full      # per-client state memory (issue 29; ~4 min)

# a fleet of up to 10^7 devices (issue 36; also in `make bench`): peak RSS, set-up seconds,
# per-round ms at 10^4 .. 10^7 clients, FedAvg and FedSUM, 100 selected a round, and the memory
# per idle client -> benchmarks/results/fleet.json and fleet.md (about 5 min on 2 cores; the
# 10^7 runs need about 2 GB). FLEET_FLAGS: e.g. --sizes 10000,100000 --algorithms fedavg
FLEET_FLAGS ?=
.PHONY: bench-fleet
bench-fleet: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m benchmarks.fleet $(FLEET_FLAGS)

# a busy machine (issue 36; also in `make bench`): the quickstart and W1 under the default thread
# setting against one job at a time on one and on two torch threads, with 0, 2 and 4 background
# busy processes that it starts and stops itself -> benchmarks/results/busy.json and busy.md
# (about 30 min on an idle 2-core machine, much longer on a busy one). BUSY_FLAGS: e.g. --quick,
# --reps 7, --loads 0,4
BUSY_FLAGS ?=
.PHONY: bench-busy
bench-busy: $(STAMP)
	$(BIN)/python -m benchmarks.busy $(BUSY_FLAGS)

# mutation testing (issue 26), outside CI: mutmut 2 (the `mutate` extra) mutates one core module
# at a time, in place (restored after each mutant), and runs only the fast tests that own it, so
# each pair is bounded. MUTATE picks pairs by name (default: every pair; about 10-40 min each on
# 2 cores). Each pair writes $(MUT_DIR)/<pair>.txt: the score line, then the diff of every
# survivor. docs/mutation.md has the scores and the reasons of the survivors kept.
# Robustness (the "Mutant.line is required" crash): mutmut's cache names a mutant by its line's
# text and number, and any other mutmut command (show, apply, a second run) re-reads the module
# while a mutant is on disk, drops that line from the cache, and the run then dies; the dying
# run leaves the module empty or mutated, with the original in <module>.bak. Hence: one run at a
# time (a lock), no mutmut command inside a run, a cache per pair keyed by the module's content
# (an edited module starts afresh), a left-over <module>.bak restored before and after each
# pair, and the module checked byte for byte against its state before the pair.
# The runner turns every failing status into 1: mutmut 2 counts only status 1 as a kill, and a
# mutant that breaks an import fails pytest's collection with status 2 (or a conftest's with 4),
# which mutmut would count as a survivor; setpriv kills pytest if mutmut kills the shell (timeout).
# string, f-string and decorator mutants are left out: they change docstrings and field
# descriptions, which no test should pin; -m 10: on a loaded machine a mutant's tests may run
# several times slower than the baseline without looping
MUT_FLAGS ?= --disable-mutation-types string,fstring,decorator -m 10
MUT_DIR  := build/mutmut
MUTATE ?= invariants fedsum network availability selection fedasync fedumf assignment vector
MUT_selection    := devices/selectors/static.py|tests/test_devices_availability.py::test_uniform_selects_exactly_k \
  tests/test_devices_availability.py::test_cyclic_every_client_once_per_epoch \
  tests/test_devices_availability.py::test_cyclic_wraps_and_skips_unavailable \
  tests/test_devices_availability.py::test_reshuffled_cyclic_takes_one_permutation_per_epoch_in_order \
  tests/test_devices_availability.py::test_biased_staircase_frequencies tests/test_selection_patterns.py
MUT_availability := devices/availability.py|tests/test_devices_availability.py tests/test_availability_models.py
MUT_network      := devices/network.py|tests/test_devices_network.py tests/test_engine_shared_links.py
MUT_assignment   := devices/assignment.py|tests/test_multimodel.py tests/test_assignment.py
MUT_invariants   := emulator/runs/invariants.py|tests/test_invariants.py
MUT_fedasync     := emulator/algorithms/fedasync.py|tests/test_tsfl.py::test_t13_fedasync_footnote_rule \
  tests/test_tsfl.py::test_t14_fedasync_staleness_and_mixing tests/test_tsfl.py::test_fedbuff_buffer_closed_forms \
  tests/test_tsfl.py::test_fedasync_defaults_bounds_and_protocol tests/test_fedasync_rules.py
MUT_fedsum       := emulator/algorithms/fedsum.py|tests/test_fedsum_reference.py
MUT_fedumf       := emulator/algorithms/fedumf.py|tests/test_fedumf.py tests/test_fedumf_mutants.py
MUT_vector       := emulator/sim/protocols/vector.py|tests/test_engines.py tests/test_engine_record.py tests/test_cohort.py
.PHONY: mutate
mutate: $(STAMP)
	$(PIP) install $(PIPFLAGS) -e '.[test,mutate]'
	@set -e; mkdir -p $(MUT_DIR); exec 9>$(MUT_DIR)/lock; \
	flock -n 9 || { echo "make mutate: another run holds $(MUT_DIR)/lock in this tree"; exit 2; }; \
	for m in $(MUTATE); do \
	  case "$$m" in \
	    selection) pair='$(MUT_selection)';; \
	    availability) pair='$(MUT_availability)';; \
	    network) pair='$(MUT_network)';; \
	    assignment) pair='$(MUT_assignment)';; \
	    invariants) pair='$(MUT_invariants)';; \
	    fedasync) pair='$(MUT_fedasync)';; \
	    fedsum) pair='$(MUT_fedsum)';; \
	    fedumf) pair='$(MUT_fedumf)';; \
	    vector) pair='$(MUT_vector)';; \
	    *) echo "unknown MUTATE pair $$m"; exit 2;; \
	  esac; \
	  mod=$${pair%%|*}; tests=$${pair#*|}; \
	  if [ -f "$$mod.bak" ]; then echo "$$mod.bak left by a killed run: restoring $$mod from it"; mv -f "$$mod.bak" "$$mod"; fi; \
	  sum=$$(sha256sum "$$mod" | cut -c1-16); cache=$(MUT_DIR)/$$m-$$sum.sqlite; \
	  for old in $(MUT_DIR)/$$m-*.sqlite; do [ "$$old" = "$$cache" ] || rm -f "$$old"; done; \
	  rm -f .mutmut-cache; if [ -f "$$cache" ]; then mv "$$cache" .mutmut-cache; fi; \
	  trap '[ ! -f "$$mod.bak" ] || mv -f "$$mod.bak" "$$mod"; [ ! -f .mutmut-cache ] || mv -f .mutmut-cache "$$cache"' EXIT; \
	  trap 'exit 130' INT TERM; \
	  echo "== mutmut: $$mod <- $$tests"; rc=0; \
	  FLEMU_TEST_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/mutmut run --paths-to-mutate "$$mod" $(MUT_FLAGS) \
	    --runner "sh -c 'setpriv --pdeathsig KILL $(BIN)/python -m pytest -x -q -p no:cacheprovider -n 0 $$tests || exit 1'" || rc=$$?; \
	  if [ -f "$$mod.bak" ]; then mv -f "$$mod.bak" "$$mod"; fi; \
	  if [ "$$(sha256sum "$$mod" | cut -c1-16)" != "$$sum" ]; then \
	    echo "make mutate: $$mod differs from its state before the run: check it (git diff -- $$mod)"; exit 1; fi; \
	  if [ $$((rc % 2)) -eq 1 ]; then echo "make mutate: mutmut failed on $$mod (status $$rc); $$mod is restored"; exit 1; fi; \
	  $(BIN)/python -c "import sqlite3; c = sqlite3.connect('.mutmut-cache'); \
	    n = dict(c.execute('select status, count(*) from mutant group by status').fetchall()); \
	    k = n.get('ok_killed', 0) + n.get('ok_suspicious', 0) + n.get('bad_timeout', 0); t = sum(n.values()); \
	    print(f'$$m $$mod: {k}/{t} killed ({100 * k / max(t, 1):.0f}%), survived {n.get(\"bad_survived\", 0)}, ' \
	          f'untested {n.get(\"untested\", 0) + n.get(\"skipped\", 0)}')" | tee $(MUT_DIR)/$$m.txt; \
	  $(BIN)/mutmut show all >> $(MUT_DIR)/$$m.txt; \
	  mv -f .mutmut-cache "$$cache"; trap - EXIT INT TERM; \
	done; cat $(foreach m,$(MUTATE),$(MUT_DIR)/$(m).txt) 2>/dev/null | grep -E '^[a-z]+ [a-z/_]+\.py: ' || true
