# The two commands of the README: `make evidence` and `make test`. Both bootstrap .venv when it is missing
# or out of date (workflow/scripts/bootstrap_env.py), and do nothing more when it is current.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
# google-api-core (pulled in by snakemake's smart_open) warns on every start about Python 3.11's end of life.
export PYTHONWARNINGS := ignore::FutureWarning:google.api_core._python_version_support

# What `make test` adds: headless Chromium and a CJK font, so that the page screenshots are checked too.
TEST_TOOLS := chromium=chromium font:zh=fonts-noto-cjk

.PHONY: env test-tools evidence test test-fast lint screenshots

env:
	@$(PYTHON) workflow/scripts/bootstrap_env.py --venv $(VENV)
	@sh workflow/scripts/system_tools.sh

evidence: env
	snakemake --cores all

test-tools:
	@sh workflow/scripts/system_tools.sh $(TEST_TOOLS)

# Every test: first the fast ones, then, one at a time, those that run the real pipeline or real vLLM servers
# (markers `workflow` and `vllm`, tests/conftest.py): they measure, and two at once would disturb each other's
# readings. A failing fast test stops before the slow half starts.
test: test-fast
	python -m pytest -m "workflow or vllm"

# The edit-test loop: every test but the real-stack ones, spread over the machine's cores (pytest-xdist). One
# worker per test file: a notebook's cells run in order in one kernel. A few minutes at most; `make test` (what
# CI runs) before a commit.
test-fast: env test-tools
	python -m pytest -m "not workflow and not vllm" --numprocesses auto --dist loadfile

# How readers see the rendered pages: a PNG of each under screenshots/ (after `make evidence`).
screenshots: env test-tools
	kvtier screenshots --evidence-dir evidence --out-dir screenshots

lint: env
	snakemake --lint
	ruff check
