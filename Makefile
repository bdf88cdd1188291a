# servesim: `make demo` and `make test` work on a machine with only Python 3.10+ installed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CORE   := $(VENV)/.core-installed
DEV    := $(VENV)/.dev-installed

.PHONY: demo test bench lint fuzz clean

$(CORE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# torch==2.13.0 is pinned here (a CPU build these machines hold locally); the
# `calibrate` extra itself accepts any torch>=2.3.
# Ray too: the suite runs a sweep on a local Ray cluster and checks it against the
# process pool (SERVESIM_REQUIRE_RAY turns that test's skip into a failure).
$(DEV): $(CORE)
	$(BIN)/python -m pip install -q 'torch==2.13.0'
	$(BIN)/python -m pip install -q -e '.[dev,measured,ray]'
	touch $@

demo: $(CORE)
	$(BIN)/servesim simulate scenarios/quickstart.yaml --out out/quickstart

test: $(DEV)
	SERVESIM_REQUIRE_RAY=1 $(BIN)/python -m pytest

bench: $(CORE)
	$(BIN)/python bench/bench_sim.py

lint: $(DEV)
	$(BIN)/ruff check sim calibrate tests bench
	$(BIN)/mypy

fuzz: $(DEV)
	SERVESIM_FUZZ_EXAMPLES=2000 $(BIN)/python -m pytest tests -k fuzz

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
