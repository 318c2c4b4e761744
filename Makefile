# Everything builds its own environment: `make demo` and `make test` work on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.installed
# The campaign report's browser test drives Debian's Chromium (headless).
CHROMIUM := /usr/bin/chromium

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 1
# Python writes a module's bytecode the first time a process imports it, and every later process
# reads it. A machine with PYTHONDONTWRITEBYTECODE set (this one) and a venv installed without
# byte-compiling would have every process compile all it imports from source: +1.7 s of CPU to
# start a consumer (2.9 s against 1.2 s), and pytest could not cache its rewritten test modules
# (collection 25 s of CPU against 14 s), in each of the suite's hundreds of processes.
unexport PYTHONDONTWRITEBYTECODE
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: venv npm setup contracts lint test test-slow test-unit test-integration test-infra test-wheel test-chaos verify demo report-screenshot report-screenshot-ab bench bench-scale bench-fair bench-limiter clean

# uv (from PyPI, pinned in constraints.txt) installs the pinned set: the same packages pip
# installs (`uv pip freeze` of both venvs differs in pip alone), in a fraction of the time
# (a fresh venv from warm caches, on the loaded machine: pip 172 s, uv 22 s). Like pip with
# --no-compile, it leaves byte-compiling to the first import: compiling every installed
# package was most of pip's install CPU (the wheel test measured 120 s -> 44 s).
$(STAMP): requirements.txt requirements-dev.txt lambdas/sendonce/requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv -c constraints.txt
	$(BIN)/uv pip install -q --python $(BIN)/python -r requirements-dev.txt -c constraints.txt
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	touch $@

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "make: the report's browser test needs Chromium at $(CHROMIUM) (Debian: apt-get install chromium)" >&2; exit 1; }
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

venv: $(STAMP)
npm: $(NPM_STAMP)

# The published contracts (schemas/*.json, docs/openapi.json) and the docs' state-machine tables,
# regenerated from the code;
# tests/unit/test_contracts.py fails when the committed files differ from the code.
contracts: $(STAMP)
	$(BIN)/python -m sendonce_local.generated_files --write

# Tests mostly wait (visibility timeouts, provider latency, subprocesses): five workers, one
# file per worker, each with its own moto server, fit the 2-core machine. A clean-clone
# `.ci/run` here (2026-12-03): 13 min 46 s with four, 12 min 49 s with five (and LONGEST_FIRST
# re-taken; the two changes were measured together).
PYTEST_WORKERS ?= 5

# ruff (format and lint, the whole repository) and mypy (strict on lambdas/sendonce/domain):
# configured in pyproject.toml; `make test` runs them first.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# The three installs (Python packages, node_modules, Chromium) at once: on a fresh machine
# each mostly waits on the network or the disk.
setup:
	$(MAKE) -j3 --output-sync=target $(STAMP) $(NPM_STAMP) $(CHROMIUM)

test: setup
	$(MAKE) lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile -m "not slow" --durations=15

# Minutes each, so not in `make test` (15 minutes in all): the hottest ledger key of a
# 1,000-recipient batch-mode campaign (write units per key), the demo on a slowed consumer.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration

test-infra: $(STAMP) $(NPM_STAMP)
	$(BIN)/python -m pytest -q tests/infra

# The wheel alone: built, installed into a fresh venv (PyPI or the pip cache), CLI run, a
# foreign CDK app synthesized under cdk-nag, `sendonce demo --recipients 200` run outside the
# checkout (~4 min; also part of test-infra and test).
test-wheel: $(STAMP)
	$(BIN)/python -m pytest -q -m wheel tests/infra/test_wheel.py

test-chaos: $(STAMP)
	$(BIN)/python -m pytest -q tests/chaos

# The model check's deep profile (>= 20,000 steps over the real adapters on in-process moto; each of
# its three machines as two halves, the six shared by two workers, one per core), then the mutants:
# each fix of the delivery protocol reverted in turn must be caught (by the exhaustive explorer or
# the model, MUTANT_EXAMPLES examples per machine at most, stopping at the first counterexample),
# each counterexample passing on the real code; two worker processes take the mutants in turn.
# Exits 1 otherwise. Figures: model-figures.json and mutants.jsonl. Run it after any change to
# claims, leases, groups, counters or campaign states. About 90 minutes on the 2-core machine
# (2026-12-03, clean clone, beside other runs for part of it: venv 2 min, deep profile 78, mutants 8;
# 2026-12-07, beside benchmarks: deep profile 42, mutants 13).
MUTANT_EXAMPLES ?= 100
VERIFY_WORKERS ?= 2
verify: $(STAMP)
	rm -f model-figures.json.gw*
	SENDONCE_MODEL_PROFILE=deep SENDONCE_MODEL_FIGURES=model-figures.json $(BIN)/python -m pytest -q -p no:cacheprovider -n $(VERIFY_WORKERS) --dist worksteal tests/model
	$(BIN)/python -m tests.model.figures model-figures.json --min-steps 20000
	$(BIN)/python -m tests.model.mutants $(MUTANT_EXAMPLES) --jobs $(VERIFY_WORKERS) --out mutants.jsonl

demo: $(STAMP)
	$(BIN)/sendonce demo $(DEMO_ARGS)

# The README's screenshot: the demo's sendonce campaign, its report (`sendonce campaign
# report`'s page), drawn by headless Chromium. A few minutes (3,000 recipients, twice).
report-screenshot: $(STAMP)
	mkdir -p build
	$(BIN)/sendonce demo --recipients 3000 --report build/report.html
	$(BIN)/python -m sendonce_ops.report_screenshot build/report.html --out docs/img/report.png

# The README's A/B screenshot: the page of the A/B acceptance test's campaign (2,000 recipients,
# the rest's opens recorded too: about 6 minutes beside other runs), drawn the same way.
report-screenshot-ab: $(STAMP)
	mkdir -p build
	SENDONCE_AB_REPORT=build/report-ab.html $(BIN)/python -m pytest -q --timeout 900 tests/integration/test_ab_end_to_end.py
	$(BIN)/python -m sendonce_ops.report_screenshot build/report-ab.html --out docs/img/report-ab.png

bench: $(STAMP)
	$(BIN)/python -m bench.run --quick

# One campaign per size through the stack deployed into moto (not in `make test`; see docs/benchmarks.md).
# BENCH_SCALE_ARGS="--sizes 1000000" for a million.
bench-scale: $(STAMP)
	$(BIN)/python -m bench.scale $(BENCH_SCALE_ARGS)

# Campaigns sharing one queue and one provider rate (issue 31): a small campaign behind a large
# one, and equal shares of four, through the stack deployed into moto (~15 min; see docs/fairness.md).
bench-fair: $(STAMP)
	$(BIN)/python -m bench.fair $(BENCH_FAIR_ARGS)

# The shared limiter's key, write units per send from 5 to 10,000 sends/s (virtual time, ~2 min).
bench-limiter: $(STAMP)
	$(BIN)/python -m bench.limiter $(BENCH_LIMITER_ARGS)

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache
