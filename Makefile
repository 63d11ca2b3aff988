# The course's two everyday commands are `make lab` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup lab test check release store bench grade student-copy book gpu-smoke

setup: $(STAMP)

# Re-installs only when the dependency files change; a second run is a no-op. pip compiles the
# installed files to bytecode one at a time (about 30 s here); compileall -j 0 does it on every core.
# Like pip, it leaves a file that is not Python 3.11 uncompiled (torch ships a py312-only test file).
$(STAMP): requirements.txt requirements-lock.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt -c requirements-lock.txt
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null 2>&1 || true
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=.

# tests/suite.py: ruff check, release --check and store --check, then pytest beside the course
# check (jobs and time budget: autograder/check.py; report in _build/course-check.log) and, once
# the check has ended, the chapters under nbval (book/nbval_book.py; they fill the book's execution
# cache; report in _build/chapters-nbval.log), then the tests marked `alone` (the book build from
# that cache; not the load test, `pytest -m load`).
# pytest's exit code 5 ("no tests collected") is a failure.
test: setup
	$(PY) tests/suite.py

release: setup
	$(PY) -m autograder release

check: setup
	$(PY) -m autograder check

store: setup
	$(PY) -m autograder store

# What an instructor hands out: make student-copy DEST=../handout
student-copy: setup
	$(PY) -m autograder student-copy $(DEST)

# The chapters as a static site: open _build/book/index.html. Runs every chapter once under nbval; a
# second build re-runs only the chapters whose code changed (every chapter after a change in helpers/,
# stored results included, or in requirements-lock.txt).
book: setup
	$(PY) book/build.py

bench: setup
	$(PY) benchmarks/bench.py

# Self-study: grade your own notebook, e.g. make grade NB=release/01_replicated_training/01_replicated_training.ipynb
grade: setup
	$(PY) -m autograder grade $(NB)

# On a machine with GPUs: every lesson's torchrun script (helpers/lNN_slug/launch.py) with the source
# notebook's solutions on NCCL, one rank per GPU. Not yet run on a GPU (README, "On GPUs").
gpu-smoke: setup
	@gpus=$$($(PY) -c 'import torch; print(torch.cuda.device_count())'); \
	test "$$gpus" -gt 0 || { echo "gpu-smoke: torch sees no GPU"; exit 2; }; \
	for script in helpers/l[0-9][0-9]_*/launch.py; do \
	  n=$$(basename $$(dirname $$script) | cut -c2-3); \
	  $(PY) -m helpers.launch source/$${n}_*/$${n}_*.ipynb --backend nccl --nproc-per-node $$gpus || exit 1; \
	done
