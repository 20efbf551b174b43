# The course's two commands: `make lab` opens it, `make test` checks all of it.
# Both create .venv on first use and reinstall when pyproject.toml or requirements.lock changes:
# the course's exact pins are in requirements.lock (pyproject.toml states the library's ranges).
# `make lab` installs what a learner needs (the `course` extra); `make test` everything (course,
# dev, book). Each has its own stamp; the full install also stamps the course's.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
COURSE := $(VENV)/.installed-course
# The CPU build of torch: on Linux, PyPI's torch is a CUDA build (several GB). torch==V+cpu from
# pip's own sources if they hold it (a wheel folder, a mirror), else from PyTorch's CPU wheel
# index. TORCH=cu128 takes that CUDA build instead; TORCH=pypi leaves the choice to pip. Skipped
# when .venv already holds the lock's torch version (any build).
TORCH  ?= cpu
TORCH_VERSION = $(shell sed -n 's/^torch==//p' $(LOCK))
define install_torch
	@if ! $(BIN)/python -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$(TORCH_VERSION)')" 2>/dev/null \
	    && [ "$(TORCH)" != pypi ] && [ "$$(uname -s)" = Linux ]; then \
	  echo "installing torch $(TORCH_VERSION)+$(TORCH)"; \
	  $(BIN)/python -m pip install --quiet -c $(LOCK) "torch==$(TORCH_VERSION)+$(TORCH)" 2>/dev/null \
	  || $(BIN)/python -m pip install --quiet -c $(LOCK) --extra-index-url https://download.pytorch.org/whl/$(TORCH) \
	    "torch==$(TORCH_VERSION)+$(TORCH)"; \
	fi
endef
LOCK   := requirements.lock
PORT   ?= 8888
NBVAL  := --nbval --nbval-current-env --nbval-cell-timeout=300 --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test test-quick lint test-lib test-notebooks exercises experiments bench book clean help

help:
	@echo "make lab          open the course in JupyterLab (http://127.0.0.1:$(PORT), token login)"
	@echo "make test         lint, then the library tests and every notebook through nbval, in one session"
	@echo "make test-quick   lint and the library's and grader's quick tests: no notebooks, browsers or servers (~2 min)"
	@echo "make lint         ruff check"
	@echo "make exercises    regenerate exercises/ from solutions/"
	@echo "make experiments  rerun the labs (length extrapolation, context extension, resolution, language, after RoPE) and rewrite their CSVs"
	@echo "make bench        run the benchmarks and rewrite benchmarks/README.md"
	@echo "make book         build the course website into _build/book/html (EXECUTE=1 reruns the lessons first)"

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(install_torch)
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e ".[course,dev,book]"
	@touch $(STAMP) $(COURSE)

$(COURSE): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(install_torch)
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e ".[course]"
	@touch $(COURSE)

venv: $(STAMP)

# jupyter-config/ hides nbgrader's menus from learners (nbgrader is only a dev dependency) and
# JupyterLab's news prompt; nothing asks the internet for news or updates (lab/settings/overrides.json).
# Token authentication stays on: open the link with ?token=... that JupyterLab prints; it lands on
# lesson 00 (LabApp.default_url), and .venv/bin leads PATH, so posenc-grade runs in JupyterLab's terminal.
# LAB_ARGS adds JupyterLab options (e.g. --no-browser).
lab: $(COURSE)
	PATH="$(CURDIR)/$(BIN):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter-config" $(BIN)/jupyter lab \
		--ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/00_welcome.ipynb \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

# Under test, the labs train their documented smaller versions (POSENC_FAST=1); `make lab` runs the full ones.
test test-lib test-notebooks test-quick: export POSENC_FAST = 1
# Python's bytecode is cached under test even where the environment says not to (some images set
# PYTHONDONTWRITEBYTECODE=1; an empty value is unset): every worker, kernel and subprocess would
# otherwise compile the tests, tools and pytest's assertion rewrites anew (a collection: 14 CPU s
# uncached, 9 cached, 2026-12-05). The __pycache__ folders are git-ignored.
test test-lib test-notebooks test-quick: export PYTHONDONTWRITEBYTECODE =

test-lib: $(STAMP)
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile $(PYTEST_ARGS) tests

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -q -rs $(NBVAL) -n 2 --dist loadfile $(PYTEST_ARGS) notebooks solutions

# One session for the library's tests and the notebooks: the workers stay busy to the end
# (tests/conftest.py deals the slowest files first). It prints the 15 slowest tests and files.
# Three workers on two cores: a third fills the time the others wait (a grader's time limit, a
# server starting, a browser loading): 868 s -> 825 s, all else equal (2026-12-04; the latest run
# is section 8 of benchmarks/README.md).
WORKERS ?= 3
test: $(STAMP)
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest -q -rs $(NBVAL) -n $(WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS) \
		tests notebooks solutions

# The contributor's loop: lint, then every test file not marked slow in tests/conftest.py (no
# notebooks, browsers, servers or sandboxed gradings). make test still checks everything.
test-quick: $(STAMP)
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile -m "not slow" $(PYTEST_ARGS) tests

exercises: $(STAMP)
	$(BIN)/python tools/make_exercises.py

experiments: $(STAMP)
	$(BIN)/python -m posenc_lesson.lab.experiments
	$(BIN)/python -m posenc_lesson.lab.context_extension
	$(BIN)/python -m posenc_lesson.lab.vision_lab
	$(BIN)/python -m posenc_lesson.lab.lm_lab
	$(BIN)/python -m posenc_lesson.lab.after_rope_lab

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# The website, from the notebooks' stored outputs; EXECUTE=1 runs every lesson first.
book: $(STAMP)
	$(BIN)/python tools/build_book.py $(if $(filter 1,$(EXECUTE)),--execute)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
