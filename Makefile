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
# process pool (SERVESIM_REQUIRE_RAY turns that test's skip into a failure). Chromium
# renders the HTML reports in tests/test_reports.py (skipped without it): installed from
# Debian's packages when we are root and apt-get exists; never fails the target.
$(DEV): $(CORE)
	$(BIN)/python -m pip install -q 'torch==2.13.0'
	$(BIN)/python -m pip install -q -e '.[dev,measured,ray]'
	-@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
	    && [ "$$(id -u)" = 0 ]; then \
	    { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } \
	    >/dev/null 2>&1 \
	    || echo "chromium not installed: the browser checks of the reports will be skipped"; \
	fi
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
