# Kiln: `make demo` and `make test` create .venv when missing, install Kiln with what they need, and run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kiln-installed
JOBS ?= 2

.PHONY: demo test test-slow test-ray fuzz conformance conformance-compiled bench bench-wide bench-gemm limits lint clean check-tools

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kiln needs Python >= 3.11, found " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

check-tools:
	@command -v gcc >/dev/null 2>&1 || { echo "kiln needs a C compiler (gcc) to compile models: install it, e.g. 'apt-get install gcc'"; exit 1; }

demo: check-tools $(STAMP)
	$(VENV)/bin/kiln demo

test: check-tools $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) -p no:cacheprovider

# N mutated models through the importer, the interpreter and the compiled path, each guarded by memory and time
# caps: prints the split of outcomes and writes fuzz_report.json (FUZZ_SEED picks another set of cases)
N ?= 3000
FUZZ_SEED ?= 0
fuzz: check-tools $(STAMP)
	$(PY) -m tests.fuzz.runner -n $(N) --seed $(FUZZ_SEED) --json fuzz_report.json

# long suites: slow models and sweeps
test-slow: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) -m slow -p no:cacheprovider

# Kiln on Ray (issue 29): tests that start a local Ray cluster themselves, one process at a time
test-ray: check-tools $(STAMP)
	$(PY) -m pip install -q -e '.[test,ray]'
	$(PY) -m pytest -q -n 0 -m ray -p no:cacheprovider

# per-op conformance tables with the shared scorer (needs ../shared beside the checkout)
conformance: $(STAMP)
	$(PY) ../shared/conformance/onnx_conformance.py run --backend module:kiln.onnx_backend \
		--suites node,light --jobs $(JOBS) --out conformance_results.json

# every node case through the compiled path: pass rate and the cases that ran a group on the host
conformance-compiled: $(STAMP)
	$(PY) -m tests.conformance.test_compiled_cases

# the performance benchmark: Kiln vs ONNX Runtime vs PyTorch eager on the model set (installs the pinned CPU torch)
bench: check-tools $(STAMP)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) scripts/bench_models.py --json bench_results.json

# the wide benchmark (issue 31): every model family of kiln.models.wide at batch 1 and 8, 1 and 2 threads, each
# engine in its own process; BENCH_WIDE_ARGS narrows it, e.g. BENCH_WIDE_ARGS='--models mlp vgg11 --batch 1'
BENCH_WIDE_ARGS ?=
bench-wide: check-tools $(STAMP)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) scripts/bench_wide.py --json bench_wide.json --markdown bench_wide.md $(BENCH_WIDE_ARGS)

bench-gemm: check-tools $(STAMP)
	$(PY) scripts/bench_gemm.py

# this machine's FP32 FMA peak, SGEMM ceiling and memory bandwidth
limits: check-tools $(STAMP)
	$(PY) scripts/machine_limits.py

# what CI runs: every ruff rule of pyproject.toml, import sorting included, over all the Python sources
lint: $(STAMP)
	$(VENV)/bin/ruff check kiln tests scripts

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
