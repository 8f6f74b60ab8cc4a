# openreg — every target works alone on a fresh machine: it runs the steps before it when needed and
# skips what is already installed or built.

PYTHON      ?= python3
BUILD_DIR   ?= build
BUILD_TYPE  ?= RelWithDebInfo
JOBS        ?= $(shell nproc)
RESULTS_DIR ?= bench/results
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# ccache: paths relative to the checkout, so a fresh clone elsewhere (CI) reuses the cache.
export CCACHE_BASEDIR   ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= true

APT_PACKAGES := g++ ninja-build ccache libtbb-dev libboost-dev libgtest-dev libgmock-dev libbenchmark-dev clang-tidy valgrind gdb iproute2
PIP_PACKAGES := torch==2.13.0 pytest pytest-xdist numpy matplotlib expecttest ruff mypy

CMAKE_COMMON := -G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER=ccache

.PHONY: deps deps-ecosystem test-ecosystem build build-package test test-cpp test-python test-loaded test-sanitizers wheel-check lint lint-python lint-cpp demo sim-demo bench opinfo-sweep stress stress-loaded clean

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
	@$(PYTHON) -c "import torch; assert torch.__version__.split('+')[0] == '2.13.0'" 2>/dev/null || \
	  { echo "deps: installing torch==2.13.0"; $(PYTHON) -m pip install -q torch==2.13.0; }
	@$(PYTHON) -c "import pytest, xdist, numpy, matplotlib, expecttest, ruff, mypy" 2>/dev/null || \
	  { echo "deps: installing Python test/bench/lint packages"; $(PYTHON) -m pip install -q $(filter-out torch%,$(PIP_PACKAGES)); }

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DPython3_EXECUTABLE=$(shell command -v $(PYTHON))

# The Python package alone (what `make demo` runs): the sim, the backend and the bindings, none of the
# test and benchmark executables. It is installed editable once per checkout; the compiled modules land
# in python/torch_openreg/ where the editable install finds them.
build-package: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target openreg_python
	@here="$(CURDIR)/python/torch_openreg/__init__.py"; \
	found=$$($(PYTHON) -c "import importlib.util as u; s = u.find_spec('torch_openreg'); print(s.origin if s else '')" 2>/dev/null); \
	if [ "$$found" != "$$here" ]; then \
	  echo "build: installing torch_openreg (editable) from $(CURDIR)"; \
	  $(PYTHON) -m pip install -q --no-build-isolation --no-deps -e . ; \
	fi

# Everything: the package, the C++ tests, the sim's examples and benchmarks.
build: build-package
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build test-cpp test-python test-sanitizers test-ecosystem

test-cpp: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j 2

# The Python suite in PYTEST_WORKERS processes (pytest-xdist): many tests wait on child interpreters,
# so two workers keep both cores of a 2-core machine busy (21 min serially, 13.5 min in two, quiet).
PYTEST_WORKERS ?= 2
test-python: build
	$(PYTHON) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal tests/python

# The Python suite LOADED_RUNS times in a row on a loaded machine: one busy-looping process per core
# runs beside it, so every test also runs with its threads preempted and delayed. A test that passes in
# `make test` but fails here depends on timing: find its cause (CONTRIBUTING.md, "Flaky tests").
LOADED_RUNS ?= 2
test-loaded: build
	@hogs=""; trap 'kill $$hogs 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq $$(nproc)); do sh -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	for run in $$(seq $(LOADED_RUNS)); do \
	  echo "== loaded run $$run of $(LOADED_RUNS) ($$(nproc) CPU hogs beside it)"; \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python || exit 1; \
	done

# Third-party libraries people train with (transformers, accelerate, Lightning, torchtitan), pinned in
# tests/ecosystem/requirements.txt, go into a virtual environment of their own that sees the system's
# torch and torch_openreg: installing them never changes what `import torch` loads for users.
ECO_VENV := $(BUILD_DIR)/ecosystem-venv
deps-ecosystem: build
	@$(ECO_VENV)/bin/python -c "import transformers, accelerate, lightning, torchtitan" 2>/dev/null || \
	  { echo "deps-ecosystem: installing tests/ecosystem/requirements.txt into $(ECO_VENV)"; \
	    $(PYTHON) -m venv --system-site-packages $(ECO_VENV) && \
	    $(ECO_VENV)/bin/python -m pip install -q -r tests/ecosystem/requirements.txt -c tests/ecosystem/constraints.txt; }

# The ecosystem tests: the libraries above training on openreg, run with the venv's Python (torchtitan's
# tokenizer and dataset are stand-ins the tests build offline: tests/ecosystem/torchtitan_assets.py).
test-ecosystem: deps-ecosystem
	$(ECO_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/ecosystem

# The sim layer's tests again under ThreadSanitizer and AddressSanitizer (sim only: no torch needed).
test-sanitizers: deps
	@for san in thread address; do \
	  dir=$(BUILD_DIR)-$$san; \
	  [ -f $$dir/build.ninja ] || cmake -S . -B $$dir $(CMAKE_COMMON) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DOPENREG_SANITIZER=$$san -DOPENREG_BUILD_BACKEND=OFF -DOPENREG_BUILD_BENCHMARKS=OFF >/dev/null || exit 1; \
	  cmake --build $$dir -j $(JOBS) || exit 1; \
	  echo "== sim tests under $$san sanitizer"; \
	  (cd $$dir && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/cpp/tsan.supp" \
	    ASAN_OPTIONS="detect_leaks=1" LSAN_OPTIONS="suppressions=$(CURDIR)/tests/cpp/lsan.supp" ctest --output-on-failure -L sim -j 2) || exit 1; \
	done

# Packaging: a wheel made from the build directory above (no second compile) must ship the compiled
# modules and the torch.backends entry point. `pip wheel --no-build-isolation .` on a clean clone
# configures and builds on its own (setup.py drives CMake).
wheel-check: build
	$(PYTHON) .ci/check_wheel.py $(BUILD_DIR)

# Lint: ruff on all Python, mypy on the package, clang-tidy on the sim layer (the backend's ATen
# translation units take minutes each under clang-tidy, so they are left out), and the tier and
# comment-path checks (tests/support/check_tiers.py).
lint: lint-python lint-cpp
	$(PYTHON) tests/support/check_tiers.py

lint-python: deps
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy

lint-cpp: deps $(BUILD_DIR)/build.ninja
	@files=$$(git ls-files 'sim/src/*.cpp'); \
	echo "clang-tidy: $$(echo $$files | wc -w) sim files"; \
	printf '%s\n' $$files | xargs -P $(JOBS) -n 1 clang-tidy -p $(BUILD_DIR) --quiet 2>/dev/null || \
	  { echo "lint-cpp: clang-tidy found problems"; exit 1; }

# The main job: autoload, data-parallel training over two devices vs the CPU, the stream-overlap
# benchmark and device timelines (bench/demos/demo.py), DDP over two processes beside one process
# (bench/demos/demo_ddp.py), then what one FSDP2 step of a 1.4 B GPT would take on 8 modelled H100s
# (bench/demos/demo_sizing.py: 8 ranks in timing-only execution).
demo: build-package
	$(PYTHON) -m bench.demos.demo
	$(PYTHON) -m bench.demos.demo_ddp
	$(PYTHON) -m bench.demos.demo_sizing

# The sim layer alone: two streams overlapping and a bandwidth-limited copy, timed with events.
sim-demo: build
	$(BUILD_DIR)/sim/overlap_demo

# The benchmarks; model_speed_bench.py (tiny Hugging Face models) runs with the ecosystem venv's Python.
bench: deps-ecosystem
	@mkdir -p $(RESULTS_DIR)
	@for b in $(BUILD_DIR)/bench/*_bench; do \
	  echo "== $$b"; \
	  $$b --benchmark_out=$(RESULTS_DIR)/$$(basename $$b).json --benchmark_out_format=json || exit 1; \
	done
	$(PYTHON) -m bench.benchmarks.overlap_bench --out $(RESULTS_DIR)/overlap_bench.json
	$(PYTHON) -m bench.benchmarks.ops_bench --out $(RESULTS_DIR)/ops_bench.json
	$(PYTHON) -m bench.benchmarks.trace_overhead_bench --out $(RESULTS_DIR)/trace_overhead.json
	$(PYTHON) -m bench.benchmarks.default_config_bench --out $(RESULTS_DIR)/default_config_bench.json
	$(PYTHON) -m bench.benchmarks.memory_bench --out $(RESULTS_DIR)/memory_bench.json
	$(PYTHON) -m bench.benchmarks.host_path_callgrind --out $(RESULTS_DIR)/host_path_callgrind.json
	$(PYTHON) -m bench.benchmarks.compile_bench --json $(RESULTS_DIR)/compile_bench.json
	$(PYTHON) -m bench.benchmarks.compile_time_bench --out $(RESULTS_DIR)/compile_time_bench.json
	$(PYTHON) -m bench.benchmarks.allreduce_bench --json $(RESULTS_DIR)/allreduce_bench.json
	$(PYTHON) -m bench.benchmarks.interrupt_bench --out $(RESULTS_DIR)/interrupt_bench.json
	$(PYTHON) -m bench.benchmarks.graph_bench --out $(RESULTS_DIR)/graph_bench.json
	$(ECO_VENV)/bin/python -m bench.benchmarks.model_speed_bench --out $(RESULTS_DIR)/model_speed_bench.json
	$(PYTHON) -m bench.sweeps.calibration_bench --steps 1 --out $(RESULTS_DIR)
	$(PYTHON) -m bench.sweeps.symmetric_bench --out $(RESULTS_DIR)
	$(ECO_VENV)/bin/python -m bench.sweeps.titan_sizing --out $(RESULTS_DIR)/titan_sizing.json

# The OpInfo sweep at PyTorch's test depth (every op, dtype and variant against the CPU; make test runs a
# subset): prints a table and writes the report with every failure.
opinfo-sweep: build
	$(PYTHON) -m bench.sweeps.opinfo_sweep --report $(RESULTS_DIR)/opinfo_sweep.json

# The long concurrency stress run and the exit test 40 times per program (make test runs short ones).
stress: build
	$(PYTHON) -m bench.sweeps.stress --threads 4 --seconds 120
	CLEAN_EXIT_RUNS=40 $(PYTHON) -m pytest -q -p no:cacheprovider tests/python/test_clean_exit.py

# The sim's stress test STRESS_RUNS times beside a CPU hog per core; a run that passes 120 s is a hang:
# its threads' stacks go to $(BUILD_DIR)/stress-hang-stacks.txt. (It hung in 3 of 4 such runs on
# 2 cores: issue 24's closing note.)
STRESS_RUNS ?= 100
stress-loaded: build
	tests/support/hang_watch.sh $(STRESS_RUNS) 120 $(BUILD_DIR)/stress-hang-stacks.txt \
	  $(BUILD_DIR)/tests/cpp/sim_stress_test --gtest_filter='*NothingLost*'

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR)-thread $(BUILD_DIR)-address
