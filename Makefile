# Two commands for a new user: `make run` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: run test lint typecheck check-migrations ci clean

$(VENV)/bin/activate:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Agentry needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.runtime-installed: requirements.txt $(VENV)/bin/activate
	$(PIP) install --quiet -r requirements.txt
	@touch $@

$(VENV)/.dev-installed: requirements.txt requirements-dev.txt $(VENV)/bin/activate
	$(PIP) install --quiet -r requirements-dev.txt
	@touch $(VENV)/.runtime-installed $@

run: $(VENV)/.runtime-installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py serve

test: $(VENV)/.dev-installed
	$(VENV)/bin/pytest

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(VENV)/bin/mypy .

check-migrations: $(VENV)/.dev-installed
	$(PY) manage.py makemigrations --check --dry-run

ci:
	bash .ci/run

clean:
	rm -rf $(VENV) var staticfiles
