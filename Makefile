# awa: one front door for people, CI and benchmarks. `make help` lists targets.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SOURCES := pyproject.toml Cargo.toml Cargo.lock $(shell find rust -name '*.rs')

.DEFAULT_GOAL := help
.PHONY: help install pgbouncer test test-rust test-python chaos lint format demo bench bench-peers clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): $(SOURCES)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "awa needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and build awa into it (Rust core included)

pgbouncer: ## Install PgBouncer for the pooler tests where possible (root or sudo; else they skip)
	@sh tests/install-pgbouncer.sh

test: test-rust test-python ## Run the whole test suite (Rust core, then Python on real PostgreSQL)

test-rust: ## Unit tests of the pure Rust core
	cargo test --quiet

test-python: $(STAMP) pgbouncer ## Python tests (chaos short form included), then the acceptance tests through PgBouncer
	$(BIN)/python -m pytest -q
	AWA_TEST_POOLER=transaction $(BIN)/python -m pytest -q -m "not slow" tests/acceptance

chaos: $(STAMP) pgbouncer ## Long form of the fault scenarios in tests/chaos (docs/reliability.md); ~6 min
	@mkdir -p target
	AWA_CHAOS=long AWA_CHAOS_RESULTS=$(CURDIR)/target/chaos-results.jsonl \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/chaos

lint: $(STAMP) ## rustfmt, clippy, ruff, mypy and the .pyi stub check
	cargo fmt --check
	cargo clippy --quiet --all-targets -- -D warnings
	cargo clippy --quiet --features python -- -D warnings
	$(BIN)/ruff check python tests benches
	$(BIN)/ruff format --check python tests benches
	$(BIN)/mypy
	$(BIN)/python -m mypy.stubtest awa._core

format: $(STAMP) ## Format Rust and Python sources
	cargo fmt
	$(BIN)/ruff format python tests benches
	$(BIN)/ruff check --fix python tests benches

demo: $(STAMP) ## Enqueue and work a few hundred real jobs, then print where they ended up
	$(BIN)/python -m awa demo

bench: $(STAMP) ## Time the core benchmarks (pytest-benchmark)
	$(BIN)/python -m pytest benches -q --benchmark-enable --benchmark-only

bench-peers: $(STAMP) ## Side by side with awa-pg, pgqueuer, procrastinate, a plain-SQL floor (and AWA_BASELINE_PYTHON's awa)
	$(BIN)/python benches/peers/run.py --awa-python $(BIN)/python

clean: ## Remove the virtualenv and build outputs
	rm -rf $(VENV) target .pytest_cache .ruff_cache .mypy_cache
