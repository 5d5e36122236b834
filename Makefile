# Two commands do all the set-up on a fresh machine (see scripts/bootstrap.sh):
#   make run    the main job (default: BM25 vs all-MiniLM-L6-v2 on beir/scifact/test); ARGS="..." passes options to `selfsup run`
#   make test   the whole test suite (what CI runs); PYTEST_ARGS="..." passes options to pytest
#               It runs two pytest workers, each taking a whole test file at a time, and gives
#               torch one thread in each (and in the processes its tests start): on 2 cores that
#               is faster than one worker with two threads (experiments/results/ci_time-*.txt).
#   make quick  the suite without the tests marked slow (for local work: about a third of the time)
#   make lint   ruff over the repository (ruff.toml); `make test` runs it first
SHELL := /bin/bash
.DEFAULT_GOAL := run
.PHONY: run test quick lint

run:
	@source scripts/bootstrap.sh && $(BYTECODE) && selfsup run $(ARGS)

WORKERS := OMP_NUM_THREADS=1 python -m pytest -n 2 --dist loadfile
# Python writes bytecode as modules are first imported, even where the environment says not to:
# the install compiles none, and each process the tests start would otherwise compile torch.
BYTECODE := unset PYTHONDONTWRITEBYTECODE

lint:
	@source scripts/bootstrap.sh && ruff check .

test:
	@source scripts/bootstrap.sh && ruff check . && $(BYTECODE) && $(WORKERS) $(PYTEST_ARGS)

quick:
	@source scripts/bootstrap.sh && $(BYTECODE) && $(WORKERS) -m "not slow" $(PYTEST_ARGS)
