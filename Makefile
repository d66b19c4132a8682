# Gatehouse. `make demo` runs the product on SQLite + the embedded broker;
# `make test` runs the whole suite against PostgreSQL and Redis.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

TEST_ENV := SECRET_KEY=test-secret-key-not-for-production-0123456789abcdef \
	DEBUG=0 ALLOWED_HOSTS=localhost,127.0.0.1,testserver \
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gatehouse} \
	CELERY_BROKER_URL=$${CELERY_BROKER_URL:-redis://127.0.0.1:6379/15} \
	GATEHOUSE_RATE_LIMIT_PER_MINUTE=$${GATEHOUSE_RATE_LIMIT_PER_MINUTE:-100000} \
	DJANGO_ALLOW_ASYNC_UNSAFE=true GATEHOUSE_DEMO=1 \
	GATEHOUSE_SECRETS_KEYS=$${GATEHOUSE_SECRETS_KEYS:-M8B_JIt_yG7dk7xMDCDpZE-pLuGcTwG1emAyA4cpKCY=} \
	GATEHOUSE_SIGNING_KEYS=$${GATEHOUSE_SIGNING_KEYS:-$(CURDIR)/tests/keys/test-signing-key.pem}

.PHONY: demo test lint format bench bench-test venv

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

venv: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m demo.run

test: $(VENV)/.installed
	$(TEST_ENV) $(PY) -m pytest $(PYTEST_ARGS)

# mypy's Django plugin imports the settings: DEBUG=1 gives them a development SECRET_KEY, GATEHOUSE_DEMO=1 installs
# the demo app, which is checked too.
# tests and bench are not checked yet.
TYPED_APPS := vault audit toolcatalog agents accounts oauth config demo agentloop approvals notifications

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	DEBUG=1 GATEHOUSE_DEMO=1 $(BIN)/mypy $(TYPED_APPS)

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: bench-test
	$(PY) -m bench.run

# The bench's own code (its settings, server and figures), apart from the product's suite.
bench-test: $(VENV)/.installed
	$(TEST_ENV) $(PY) -m pytest --ds=bench.settings bench/tests $(PYTEST_ARGS)
