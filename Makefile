# awa: one front door for people, CI and benchmarks. `make help` lists targets.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DIST   := target/dist
SOURCES := pyproject.toml Cargo.toml Cargo.lock $(shell find rust -name '*.rs')
RUST_VERSION := $(shell sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
# Building the core needs cargo: without it, stop at once and say where to get it.
NEED_CARGO = @command -v cargo >/dev/null 2>&1 || { echo "awa: building the Rust core needs Rust $(RUST_VERSION) or newer and no cargo is on PATH; install Rust with rustup (https://rustup.rs), then run make again" >&2; exit 1; }

.DEFAULT_GOAL := help
.PHONY: help install wheel pgbouncer chromium test test-rust test-python chaos lint format docs demo bench bench-peers bench-compare bench-baseline bench-latency clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "awa needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The build (maturin, release profile) is the long step: -v shows cargo's progress.
$(STAMP): $(SOURCES) | $(BIN)/python
	$(NEED_CARGO)
	@echo "building awa into $(VENV) (the Rust core: a minute or two the first time)"
	$(BIN)/python -m pip install -v --progress-bar off -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and build awa into it (Rust core included)

# maturin at the version pyproject.toml's [build-system] asks for (read from there).
$(BIN)/maturin: pyproject.toml | $(BIN)/python
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' > $(VENV)/build-requires.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/build-requires.txt
	@touch $@

# The backend pyproject.toml names wraps maturin's, so maturin's warning that
# it is not `maturin` would mislead: silenced.
wheel: $(BIN)/maturin ## The release wheel for this machine (abi3: CPython 3.11+) and the sdist, in target/dist (emptied first)
	$(NEED_CARGO)
	rm -rf $(DIST)
	MATURIN_NO_MISSING_BUILD_BACKEND_WARNING=1 $(BIN)/maturin build --release --sdist --out $(DIST)
	@ls -l $(DIST)

pgbouncer: ## Install PgBouncer for the pooler tests where possible (root or sudo; else they skip)
	@sh tests/install-pgbouncer.sh

chromium: ## Install Chromium and chromedriver for the dashboard's browser tests where possible (root or sudo; else they skip)
	@sh tests/install-chromium.sh

test: test-rust test-python ## Run the whole test suite (Rust core, then Python on real PostgreSQL)

test-rust: ## Unit tests of the pure Rust core
	cargo test --quiet

# No -q: pytest's header names the database the tests use (tests/conftest.py).
test-python: $(STAMP) pgbouncer chromium ## Python tests (chaos short form included), then the acceptance tests through PgBouncer
	$(BIN)/python -m pytest
	AWA_TEST_POOLER=transaction $(BIN)/python -m pytest -m "not slow" tests/acceptance

chaos: $(STAMP) pgbouncer ## Long form of the fault scenarios in tests/chaos (docs/reliability.md); ~6 min
	@mkdir -p target
	AWA_CHAOS=long AWA_CHAOS_RESULTS=$(CURDIR)/target/chaos-results.jsonl \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/chaos

lint: $(STAMP) ## rustfmt, clippy, ruff, mypy and the .pyi stub check
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --features python -- -D warnings
	$(BIN)/ruff check python tests benches build_backend
	$(BIN)/ruff format --check python tests benches build_backend
	$(BIN)/mypy
	$(BIN)/python -m mypy.stubtest awa._core

format: $(STAMP) ## Format Rust and Python sources
	cargo fmt
	$(BIN)/ruff format python tests benches build_backend
	$(BIN)/ruff check --fix python tests benches build_backend

# mkdocs.yml: docs/*.md and the API reference generated from the docstrings.
# --strict: a broken link or a docstring that cannot be rendered fails the build.
docs: $(STAMP) ## Build the documentation site (guides and API reference) into target/site
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir target/site
	@echo "open target/site/index.html"

demo: $(STAMP) ## Enqueue and work a few hundred real jobs, then print where they ended up
	$(BIN)/python -m awa demo

bench: $(STAMP) ## Time the core benchmarks (pytest-benchmark)
	$(BIN)/python -m pytest benches -q --benchmark-enable --benchmark-only

bench-peers: $(STAMP) ## Side by side with awa-pg, pgqueuer, procrastinate, a plain-SQL floor (and AWA_BASELINE_PYTHON's awa)
	$(BIN)/python benches/peers/run.py --awa-python $(BIN)/python

# The peer workloads as pytest-benchmark groups (benches/compare). AWA_BENCH_QUICK=1
# runs run.py's --quick sizes; each size has its own baseline in benches/baselines.
# A baseline made on another machine is compared with a warning (the suite's
# warnings-as-errors would otherwise stop the run before it starts).
COMPARE_MODE     := $(if $(filter-out 0,$(AWA_BENCH_QUICK)),quick,full)
COMPARE_BASELINE ?= benches/baselines/compare-$(COMPARE_MODE).json
COMPARE_REPORT   := benches/compare/results/compare-$(COMPARE_MODE)-latest.json
COMPARE_PYTEST    = $(BIN)/python -m pytest benches/compare/bench_compare.py -p no:cacheprovider \
	--benchmark-enable --benchmark-only --benchmark-sort=name \
	--benchmark-columns=min,median,max,rounds \
	-W "default::pytest_benchmark.logger.PytestBenchmarkWarning"

bench-compare: $(STAMP) ## Peer workloads side by side against benches/baselines (AWA_BENCH_QUICK=1: ~3 min); fails if awa-queue is >10 % slower
	@test -f $(COMPARE_BASELINE) || { echo "no baseline $(COMPARE_BASELINE): make bench-baseline makes one (AWA_BENCH_QUICK=1 compares against the quick one)" >&2; exit 1; }
	@mkdir -p $(dir $(COMPARE_REPORT))
	@status=0; \
	$(COMPARE_PYTEST) --benchmark-compare=$(COMPARE_BASELINE) --benchmark-json=$(COMPARE_REPORT) || status=1; \
	$(BIN)/python benches/compare/check_regression.py $(COMPARE_BASELINE) $(COMPARE_REPORT) --system awa_queue --max-regression 10 || status=1; \
	exit $$status

bench-baseline: $(STAMP) ## Measure the peer workloads and write them as the new baseline (benches/baselines/compare-<mode>.json)
	$(COMPARE_PYTEST) --benchmark-json=$(COMPARE_BASELINE)

# Latency under load (benches/latency): the sweep runs in .venv, the plot in a
# venv of its own with matplotlib, so the project's install stays lean.
LATENCY_VENV ?= benches/latency/.venv
LATENCY_ARGS ?=
LATENCY_PNG  ?= docs/img/latency-curve.png

$(LATENCY_VENV)/.installed: benches/latency/requirements-plot.txt
	$(PYTHON) -m venv $(LATENCY_VENV)
	$(LATENCY_VENV)/bin/python -m pip install --quiet -r benches/latency/requirements-plot.txt
	cp benches/latency/requirements-plot.txt $@

bench-latency: $(STAMP) $(LATENCY_VENV)/.installed ## Insert-commit to handler-start latency at rising offered rates, 60 s each, plotted to docs/img (LATENCY_ARGS="--duration 5": smoke)
	@results=$$($(BIN)/python benches/latency/latency.py $(LATENCY_ARGS)) && \
	$(LATENCY_VENV)/bin/python benches/latency/plot.py $$results $(LATENCY_PNG)

clean: ## Remove the virtualenv and build outputs
	rm -rf $(VENV) target .pytest_cache .ruff_cache .mypy_cache
