SHELL := /bin/bash
# Ocular build and test entry points.  Finds pyenv's CPython 3.12 and 3.13 by glob;
# PYTHON=/path/to/python3.x overrides (a single interpreter).
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
PY312 := $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3.12)))
PY313 := $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.13.*/bin/python3.13)))
ifdef PYTHON
PYTHONS := $(PYTHON)
else
PYTHONS := $(strip $(PY312) $(PY313))
ifeq ($(PYTHONS),)
PYTHONS := $(shell command -v python3.13 python3.12 2>/dev/null)
endif
endif
FIRST := $(firstword $(PYTHONS))
SRC := $(wildcard src/ocular/_ext/*.c src/ocular/_ext/*.h) setup.py

.PHONY: all build example test bench clean check-python

all: build

check-python:
	@test -n "$(FIRST)" || { echo "error: no CPython >= 3.12 found (looked in $(PYENV_ROOT)/versions; set PYTHON=...)"; exit 1; }

# venv per interpreter with setuptools + test dependencies (requirements-test.txt)
.venv-%/.ready: requirements-test.txt
	@py=$$(for p in $(PYTHONS); do v=$$($$p -c 'import sys;print("%d.%d"%sys.version_info[:2])'); [ "$$v" = "$*" ] && echo $$p; done | head -1); \
	test -n "$$py" || { echo "error: no python$* found"; exit 1; }; \
	$$py -m venv .venv-$* && .venv-$*/bin/python -m pip install -q --upgrade pip && \
	.venv-$*/bin/python -m pip install -q -r requirements-test.txt && touch $@

VERSIONS = $(foreach p,$(PYTHONS),$(shell $(p) -c 'import sys;print("%d.%d"%sys.version_info[:2])'))

build: check-python $(foreach v,$(VERSIONS),.venv-$(v)/.ready)
	@for v in $(VERSIONS); do \
	  echo "== building ocular for Python $$v"; \
	  .venv-$$v/bin/python setup.py -q build_ext --inplace 2>&1 | grep -v "^running\|^copying\|^creating" ; \
	  test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

example: build
	PYTHONPATH=src .venv-$(firstword $(VERSIONS))/bin/python -m ocular -o examples/ocular_trace.json examples/primes.py

test: build
	@for v in $(VERSIONS); do \
	  echo "== tests on Python $$v"; \
	  PYTHONPATH=src .venv-$$v/bin/python -m pytest -q tests || exit 1; \
	done

bench: build
	PYTHONPATH=src .venv-$(firstword $(VERSIONS))/bin/python -m bench

clean:
	rm -rf build src/ocular/*.so src/*.egg-info
