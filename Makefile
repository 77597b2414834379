SHELL := /bin/bash
# Ocular build and test entry points.  Finds CPython 3.12, 3.13, 3.14 and 3.15: pyenv's
# ($(PYENV_ROOT)/versions/3.X.*) first, else a prefix under $(OCULAR_PYTHONS)/3.X (default
# /opt/ocular-pythons, made by ../shared/tools/get-python.sh; .ci/run makes the missing ones), else
# python3.X on PATH (a distribution's package).
# PYTHON=/path/to/python3.x overrides (a single interpreter); PYTHON_VERSIONS="3.13 3.14" picks some.
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
OCULAR_PYTHONS ?= /opt/ocular-pythons
PYTHON_VERSIONS ?= 3.12 3.13 3.14 3.15
find_python = $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python$(1)))),$(wildcard $(OCULAR_PYTHONS)/$(1)/bin/python$(1)),$(shell command -v python$(1) 2>/dev/null))
ifdef PYTHON
PYTHONS := $(PYTHON)
else
$(foreach v,$(PYTHON_VERSIONS),$(eval PYTHON_$(v) := $(call find_python,$(v))))
PYTHONS := $(strip $(foreach v,$(PYTHON_VERSIONS),$(PYTHON_$(v))))
# MISSING: the versions asked for and not found; check-versions prints one line each (and does not fail)
MISSING := $(strip $(foreach v,$(PYTHON_VERSIONS),$(if $(PYTHON_$(v)),,$(v))))
ifeq ($(PYTHONS),)
PYTHONS := $(shell command -v python3.15 python3.14 python3.13 python3.12 2>/dev/null)
endif
endif
FIRST := $(firstword $(PYTHONS))
SRC := $(wildcard src/ocular/_ext/*.c src/ocular/_ext/*.h) setup.py

.PHONY: all build example pythons check-versions test test-installed test-asan test-valgrind test-stdlib bench bench-quick bench-memory clean check-python

all: build

# pythons: the interpreters make would use, one line each (version and path); the missing ones on stderr
pythons:
	@for p in $(PYTHONS); do echo "$$($$p -c 'import sys;print("%d.%d.%d"%sys.version_info[:3])') $$p"; done
	@{ $(missing_lines) } >&2

check-python:
	@test -n "$(FIRST)" || { echo "error: no CPython >= 3.12 found (looked in $(PYENV_ROOT)/versions and $(OCULAR_PYTHONS); set PYTHON=...)"; exit 1; }

# check-versions: what the targets that run on every version need; one line per supported version not found
# (skipped, not an error) with how to get it: ../shared/tools/get-python.sh where it exists (our machines)
GET_PYTHON := $(wildcard $(CURDIR)/../shared/tools/get-python.sh)
missing_lines = for v in $(MISSING); do \
	  echo "== Python $$v not found, skipped: pyenv install $$v, or python$$v on PATH, or OCULAR_PYTHONS=DIR holding $$v/bin/python$$v$(if $(GET_PYTHON), (here: ../shared/tools/get-python.sh $$v $(OCULAR_PYTHONS)/$$v))"; \
	done
check-versions: check-python
	@$(missing_lines)

# venv per interpreter: .base holds what the build needs (setuptools: the package needs nothing but CPython),
# .ready adds the test dependencies (requirements-test.txt)
.venv-%/.base:
	@py=$$(for p in $(PYTHONS); do v=$$($$p -c 'import sys;print("%d.%d"%sys.version_info[:2])'); [ "$$v" = "$*" ] && echo $$p; done | head -1); \
	test -n "$$py" || { echo "error: no python$* found"; exit 1; }; \
	$$py -m venv .venv-$* && .venv-$*/bin/python -m pip install -q "setuptools>=77" && touch $@

.PRECIOUS: .venv-%/.base  # (kept: make would delete it as an intermediate of .ready)
.venv-%/.ready: .venv-%/.base requirements-test.txt
	@.venv-$*/bin/python -m pip install -q --upgrade pip && \
	.venv-$*/bin/python -m pip install -q -r requirements-test.txt && touch $@

VERSIONS = $(foreach p,$(PYTHONS),$(shell $(p) -c 'import sys;print("%d.%d"%sys.version_info[:2])'))
EXAMPLE_VERSION = $(firstword $(VERSIONS))

# $(call build_ext,VERSION): the extension built in place (src/ocular) with .venv-VERSION
build_ext = echo "== building ocular for Python $(1)"; \
	.venv-$(1)/bin/python setup.py -q build_ext --inplace 2>&1 | grep -v "^running\|^copying\|^creating"; \
	test $${PIPESTATUS[0]} -eq 0

build: check-versions $(foreach v,$(VERSIONS),.venv-$(v)/.ready)
	@for v in $(VERSIONS); do $(call build_ext,$$v) || exit 1; done

# example: one interpreter (the first found), a venv with nothing but setuptools, no test tooling
example: check-python .venv-$(EXAMPLE_VERSION)/.base
	@$(call build_ext,$(EXAMPLE_VERSION))
	PYTHONPATH=src .venv-$(EXAMPLE_VERSION)/bin/python -m ocular -o examples/ocular_trace.pftrace examples/primes.py

# PYTEST_JOBS: test processes at a time (pytest-xdist; default one per CPU, 1: no workers).  Each test runs
# its traced programs in interpreters of their own, so two at a time share nothing but the CPUs.
PYTEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
PYTEST_N = $(if $(filter-out 0 1,$(PYTEST_JOBS)),-n $(PYTEST_JOBS))
# $(call suite,PYTEST COMMAND,TESTS): with workers, the tests marked `quiet` (timings compared within a run,
# which another test's load would skew) run after the others, one at a time (exit status 5: none selected)
suite = $(if $(PYTEST_N),$(1) $(PYTEST_N) -m "not quiet" $(2) && { $(1) -m quiet $(2) || test $$? -eq 5; },$(1) $(2))

test: build
	@for v in $(VERSIONS); do \
	  echo "== tests on Python $$v"; s=$$SECONDS; \
	  { export PYTHONPATH=src; $(call suite,.venv-$$v/bin/python -m pytest -q,tests); } || exit 1; \
	  echo "== tests on Python $$v: passed in $$((SECONDS - s)) s"; \
	done$(if $(MISSING),; echo "== not tested (not found, see the first lines): Python $(MISSING)")

# test-installed: what users install.  For each interpreter: a wheel built from the tree (build/ leftovers of
# earlier builds removed first), installed with the test dependencies into a fresh venv
# (build/installed-X.Y/venv), and the tests run against it: OCULAR_TEST_INSTALLED=1 puts nothing from src/ on
# any path, and tests/test_wheel.py fails if the wheel lacks a file of src/ocular.  The whole suite on the
# versions in INSTALLED_FULL (default: all), INSTALLED_SMOKE (the package's files, API, command line and formats)
# on the others: their code is what `make test` ran; what can differ is what the wheel holds.  The tests marked
# `quiet` (timings compared within a run: what the code does, not what the wheel holds) run in `make test` only.
INSTALLED_FULL ?= $(VERSIONS)
INSTALLED_SMOKE ?= tests/test_wheel.py tests/test_api.py tests/test_cli_report.py tests/test_formats.py
test-installed: check-versions
	@for v in $(VERSIONS); do \
	  if echo " $(INSTALLED_FULL) " | grep -q " $$v "; then t=tests; else t="$(INSTALLED_SMOKE)"; fi; \
	  echo "== tests against the installed wheel on Python $$v: $$t"; \
	  py=$$(for p in $(PYTHONS); do [ "$$($$p -c 'import sys;print("%d.%d"%sys.version_info[:2])')" = "$$v" ] && echo $$p; done | head -1); \
	  d=build/installed-$$v; rm -rf $$d build/lib.* build/bdist.* && mkdir -p $$d/wheel && \
	  $$py -m venv $$d/venv && $$d/venv/bin/python -m pip install -q --upgrade pip && \
	  $$d/venv/bin/python -m pip install -q -r requirements-test.txt && \
	  $$d/venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w $$d/wheel . && \
	  $$d/venv/bin/python -m pip install -q --no-deps $$d/wheel/*.whl && \
	  { export OCULAR_TEST_INSTALLED=1 OCULAR_TEST_WHEEL=$$(ls $$d/wheel/*.whl); \
	    $$d/venv/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_N) -m "not quiet" $$t; } || exit 1; \
	done

# ---- reliability: sanitizers, valgrind, CPython's own test suite ----------------------------------
# test-asan: the extension built with AddressSanitizer + UndefinedBehaviorSanitizer into build/san-X.Y
# (a copy of the package; the in-place .so is untouched), then a subset of the tests against it with
# the sanitizer runtimes preloaded into pyenv's Python (and every interpreter the tests start).
# Leak detection is off (CPython keeps memory until exit by design); any other report fails the run.
SAN_CC ?= gcc
SAN_CFLAGS := -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
              -fno-sanitize-recover=undefined -Wall -Wextra -D_GNU_SOURCE -fvisibility=hidden -fPIC -shared -pthread
ASAN_TESTS ?= tests/test_report.py tests/test_api.py tests/test_stress.py tests/test_live_render.py \
  tests/test_perfetto.py::test_rendering_on_two_threads_is_the_same_trace \
  tests/test_asyncio.py::test_thousands_of_tasks_at_once_each_step_has_its_flow \
  tests/test_asyncio.py::test_each_scheduling_of_a_task_is_a_flow_to_the_step_it_began \
  tests/test_asyncio.py::test_a_loop_callback_that_holds_the_loop_is_a_stall_too
ASAN_K ?= not cli
ASAN_ENV = LD_PRELOAD="$$($(SAN_CC) -print-file-name=libasan.so) $$($(SAN_CC) -print-file-name=libubsan.so)" \
           ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=99 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=98 PYTHONMALLOC=malloc

# build/san-X.Y/ocular: the package sources plus _ocular built by $(SAN_CC) with $(1) (one python: $(2))
define san_build
	d=build/san-$$v; rm -rf $$d; mkdir -p $$d && cp -r src/ocular $$d/ && rm -f $$d/ocular/*.so && \
	inc=$$($(2) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') && \
	suf=$$($(2) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') && \
	$(SAN_CC) $(1) -I$$inc src/ocular/_ext/*.c -o $$d/ocular/_ocular$$suf
endef

# ASAN_VERSIONS, VALGRIND_VERSIONS, STDLIB_VERSIONS: a subset of the versions found (default: all)
ASAN_VERSIONS ?= $(VERSIONS)
VALGRIND_VERSIONS ?= $(VERSIONS)
STDLIB_VERSIONS ?= $(VERSIONS)

test-asan: build
	@for v in $(filter $(ASAN_VERSIONS),$(VERSIONS)); do \
	  echo "== ASan+UBSan tests on Python $$v"; s=$$SECONDS; \
	  $(call san_build,$(SAN_CFLAGS),.venv-$$v/bin/python) || exit 1; \
	  $(ASAN_ENV) OCULAR_TEST_SRC=$$PWD/$$d PYTHONPATH=$$PWD/$$d \
	    .venv-$$v/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_N) $(ASAN_TESTS) -k "$(ASAN_K)" || exit 1; \
	  echo "== ASan+UBSan tests on Python $$v: passed in $$((SECONDS - s)) s"; \
	done

# test-valgrind: memcheck over the traced programs of a few stress tests (pytest itself runs natively;
# conftest.python_cmd() starts each test interpreter under $(VALGRIND)).  PYTHONMALLOC=malloc lets
# memcheck see every Python allocation; tests/valgrind-python.supp silences CPython's own noise.
VALGRIND ?= valgrind
VALGRIND_TESTS ?= tests/test_stress.py
VALGRIND_K ?= threads_with or fork or limit and 1000 or sys_exit or full_file or random or non_utf8
# --fair-sched: without it valgrind's thread lock starves the thread that waits for the GIL (16 threads)
VALGRIND_CMD = $(VALGRIND) -q --fair-sched=yes --error-exitcode=97 --suppressions=$(CURDIR)/tests/valgrind-python.supp

test-valgrind: build
	@command -v $(VALGRIND) >/dev/null || { echo "error: valgrind not found (apt-get install valgrind)"; exit 1; }
	@for v in $(filter $(VALGRIND_VERSIONS),$(VERSIONS)); do \
	  echo "== valgrind memcheck on Python $$v"; s=$$SECONDS; \
	  PYTHONMALLOC=malloc OCULAR_STRESS_SCALE=0.1 OCULAR_TEST_WRAPPER="$(VALGRIND_CMD)" PYTHONPATH=src \
	    .venv-$$v/bin/python -m pytest -q -p no:cacheprovider $(VALGRIND_TESTS) -k "$(VALGRIND_K)" || exit 1; \
	  echo "== valgrind memcheck on Python $$v: passed in $$((SECONDS - s)) s"; \
	done

# test-stdlib: CPython's own test modules, untraced and then under `python -m ocular` in both modes: same
# exit status, same regrtest summary, valid trace (tests/stdlib_compare.py); the modules that differ under
# any sys.monitoring tool are compared with a no-op tool instead (docs/stdlib-differences.md).
# STDLIB_SET=ci: 40 of the 71 modules, without the longest (what .ci/run uses on every interpreter).
# STDLIB_JOBS: modules compared at a time (default: one per CPU; each module's own runs stay in sequence).
STDLIB_SET ?= full
STDLIB_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
test-stdlib: build
	@for v in $(filter $(STDLIB_VERSIONS),$(VERSIONS)); do \
	  echo "== stdlib test modules, traced vs untraced, on Python $$v"; s=$$SECONDS; \
	  .venv-$$v/bin/python tests/stdlib_compare.py --set $(STDLIB_SET) --jobs $(STDLIB_JOBS) || exit 1; \
	  echo "== stdlib test modules on Python $$v: passed in $$((SECONDS - s)) s"; \
	done

# bench: every section (micro, pyperformance, e2e, nowait, memory, callgrind), ~20 min: bench/results.md, results.png
# (bench/README.md).  BENCH_ARGS passes options, e.g. make bench BENCH_ARGS="--python 3.13".
bench: build
	PYTHONPATH=src .venv-$(firstword $(VERSIONS))/bin/python -m bench $(BENCH_ARGS)

bench-quick: build
	PYTHONPATH=src .venv-$(firstword $(VERSIONS))/bin/python -m bench --quick $(BENCH_ARGS)

# bench-memory: 100M events, to a file and in the flight recorder (ring=64M): peak RSS, throughput, pauses (~1 min)
bench-memory: build
	PYTHONPATH=src .venv-$(firstword $(VERSIONS))/bin/python -m bench --memory $(BENCH_ARGS)

clean:
	rm -rf build src/ocular/*.so src/*.egg-info
