# Two commands do all the set-up on a fresh machine (see scripts/bootstrap.sh):
#   make run    the main job (default: BM25 vs all-MiniLM-L6-v2 on beir/scifact/test); ARGS="..." passes options to `selfsup run`
#   make test   the whole test suite (what CI runs); PYTEST_ARGS="..." passes options to pytest
#   make quick  the suite without the tests marked slow (for local work: about a third of the time)
SHELL := /bin/bash
.DEFAULT_GOAL := run
.PHONY: run test quick

run:
	@source scripts/bootstrap.sh && selfsup run $(ARGS)

test:
	@source scripts/bootstrap.sh && python -m pytest $(PYTEST_ARGS)

quick:
	@source scripts/bootstrap.sh && python -m pytest -m "not slow" $(PYTEST_ARGS)
