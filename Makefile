# Two commands for a new user: `make run` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# code_run's Python, built with the system interpreter: the sandbox sees /usr, not this venv.
SANDBOX_PYTHON_DIR := $(or $(SANDBOX_PYTHON_DIR),var/sandbox-python)

.PHONY: run test lint typecheck check-migrations ci clean sandbox-python

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

# Tolerant: without PyPI or python3-venv, `make` goes on and code_run stays hidden, saying why.
$(SANDBOX_PYTHON_DIR)/.installed: requirements-sandbox.txt
	@mkdir -p $(dir $(SANDBOX_PYTHON_DIR))
	@if /usr/bin/python3 -m venv --clear $(SANDBOX_PYTHON_DIR) \
		&& $(SANDBOX_PYTHON_DIR)/bin/pip install --quiet --only-binary=:all: -r requirements-sandbox.txt; then \
		touch $@; \
	else \
		echo "sandbox Python not built: code_run stays hidden until 'make sandbox-python' succeeds"; \
	fi

sandbox-python: $(SANDBOX_PYTHON_DIR)/.installed

run: $(VENV)/.runtime-installed $(SANDBOX_PYTHON_DIR)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py serve

test: $(VENV)/.dev-installed $(SANDBOX_PYTHON_DIR)/.installed
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
