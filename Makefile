# imprint — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STATE := .imprint
STAMP := $(VENV)/.installed
export IMPRINT_STATE_DIR ?= $(CURDIR)/$(STATE)
export KAFKA_PORT ?= 9092
export PG_PORT ?= 5432
TEST_KAFKA ?= 127.0.0.1:$(KAFKA_PORT)
TEST_DATABASE ?= postgresql://imprint:imprint@127.0.0.1:$(PG_PORT)/imprint_test

.PHONY: install run test test-fast system-deps infra-up infra-down infra-reset infra-status schemas bench browser-deps proxy-deps node-deps clean
.PHONY: soak test-cluster
.PHONY: bench-quick otelcol docs

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## make run: install, start Kafka (and use embedded SQLite unless IMPRINT_DATABASE_URL is set), start the stack, play the demo.
run: install
	bash deploy/local/kafka.sh up
	IMPRINT_KAFKA_BOOTSTRAP=$${IMPRINT_KAFKA_BOOTSTRAP:-127.0.0.1:$(KAFKA_PORT)} $(BIN)/imprint up --demo $(RUN_ARGS)

## make test: install, start Kafka and PostgreSQL, run every tier.
## What it needs is prepared side by side (downloads and a Go build wait on the network and
## the disk more than on the cores); the tests run in TEST_WORKERS processes, a module each.
TEST_WORKERS ?= 2
test: install
	$(MAKE) --no-print-directory -j3 system-deps node-deps otelcol
	IMPRINT_KAFKA_BOOTSTRAP=$${IMPRINT_KAFKA_BOOTSTRAP:-$(TEST_KAFKA)} \
	IMPRINT_DATABASE_URL=$${IMPRINT_DATABASE_URL:-$(TEST_DATABASE)} \
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not cluster" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## make test-fast: the tiers that need no broker and no database server (tests/unit: pure rules,
## tests/component: one part's code in one process on memory or SQLite stores), in seconds.
test-fast: install
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/component

## The AI SDK client tier (tests/node): pinned `ai` 5.x/6.x/7.x and Node 22, from package-lock.json.
NODE_DEPS := tests/node/node_modules/.package-lock.json
$(NODE_DEPS): tests/node/package.json tests/node/package-lock.json
	npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
	touch $(NODE_DEPS)

node-deps: $(NODE_DEPS)

## make soak: a few minutes of chaos (a random part, the broker or the database killed every few
## seconds, on private servers), then the invariant check; prints the kills survived. Not in make test.
soak: install
	$(BIN)/python -m tests.fault.soak $(SOAK_ARGS)

## make test-cluster: the 3-broker KRaft cluster tier alone (a private cluster on free ports).
test-cluster: install
	$(BIN)/python -m pytest -q -p no:cacheprovider -m cluster tests/cluster $(PYTEST_ARGS)

## Debian's packages (Chromium, nginx for the conformance tier's proxy, and PostgreSQL when
## missing) are installed one apt at a time.
system-deps:
	$(MAKE) --no-print-directory browser-deps
	$(MAKE) --no-print-directory proxy-deps
	$(MAKE) --no-print-directory infra-up

browser-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

proxy-deps:
	@test -x /usr/sbin/nginx || { apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null; }

infra-up:
	bash deploy/local/infra.sh up

## The OpenTelemetry Collector the trace tests export to (tests/support/otel.py starts one per test);
## built from its Go modules once per checkout, compiled once per machine.
otelcol:
	bash deploy/local/otelcol.sh build >/dev/null

infra-down:
	bash deploy/local/infra.sh down

infra-reset:
	bash deploy/local/infra.sh reset

infra-status:
	bash deploy/local/infra.sh status

schemas: install
	$(BIN)/python -m services.tools.schemas

## make bench / make bench-quick: the performance issue's side-by-side benchmark (~20–25 min / under 4 min); results in bench/results/.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ENV = IMPRINT_KAFKA_BOOTSTRAP=$${IMPRINT_KAFKA_BOOTSTRAP:-$(TEST_KAFKA)} \
	IMPRINT_DATABASE_URL=$${IMPRINT_DATABASE_URL:-$(TEST_DATABASE)}

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,bench]'
	touch $(BENCH_STAMP)

# With IMPRINT_DATABASE_URL set, the given Kafka and PostgreSQL are used as they are (no infra-up).
BENCH_INFRA = $(if $(IMPRINT_DATABASE_URL),,infra-up)

bench: $(BENCH_STAMP) $(BENCH_INFRA)
	$(BENCH_ENV) $(BIN)/python -m bench --profile $(BENCH_ARGS)
	$(BIN)/python -m bench.docs

bench-quick: $(BENCH_STAMP) $(BENCH_INFRA)
	$(BENCH_ENV) $(BIN)/python -m bench --quick $(BENCH_ARGS)
	$(BIN)/python -m bench.docs

## make docs: the figures of README.md and docs/scaling.md from bench/results/latest.json, and the settings
## docs/scaling.md explains from the code (bench/docs.py; `--check` only compares).
docs: install
	$(BIN)/python -m bench.docs

clean:
	rm -rf $(VENV) $(STATE)/data
