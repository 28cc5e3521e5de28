# Two commands do everything on a machine with python3 and make: `make demo`, `make test`.
VENV := .venv
PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export PYTHONUNBUFFERED := 1

.PHONY: install test test-fast lint demo clean constraints

# Re-install only when pyproject.toml or the tested versions changed since the last install.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e '.[dev]' -c constraints.txt
	touch $(STAMP)

# The newest versions pyproject.toml allows, installed and frozen as the tested set.
constraints:
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade -e '.[dev]'
	{ sed -n '1,2p' constraints.txt; $(PYTHON) -m pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PYTHON) -m ruff check pe_research tests configs experiments benchmarks
	$(PYTHON) -m pytest -n 2 --dist worksteal --durations=30

# The edit-run loop: no end-to-end runs, no per-scheme batteries, compiled programs kept
# between runs in .jax_cache_tests (make test starts from an empty cache, as CI does).
test-fast: $(STAMP)
	JAX_COMPILATION_CACHE_DIR=$(CURDIR)/.jax_cache_tests $(PYTHON) -m pytest -n 2 --dist worksteal \
	  -m "not slow and not battery"

lint: $(STAMP)
	$(PYTHON) -m ruff check pe_research tests configs experiments benchmarks

demo: $(STAMP)
	$(PYTHON) experiments/demo.py

clean:
	rm -rf $(VENV) runs .pytest_cache .jax_cache_tests
