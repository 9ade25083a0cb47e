# The two commands of the README: `make evidence` and `make test`. Both bootstrap .venv when it is missing
# or out of date (workflow/scripts/bootstrap_env.py), and do nothing more when it is current.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
# google-api-core (pulled in by snakemake's smart_open) warns on every start about Python 3.11's end of life.
export PYTHONWARNINGS := ignore::FutureWarning:google.api_core._python_version_support

.PHONY: env evidence test lint

env:
	@$(PYTHON) workflow/scripts/bootstrap_env.py --venv $(VENV)
	@sh workflow/scripts/system_tools.sh

evidence: env
	snakemake --cores all

test: env
	python -m pytest

lint: env
	snakemake --lint
	ruff check
