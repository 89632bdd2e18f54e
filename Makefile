# `make bench` and `make test` each set up .venv (once) and run: the two commands the README gives.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

.PHONY: bench bench-quick roofline test info tune clean

$(VENV)/.installed-%: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$*]"
	touch $@

bench: $(VENV)/.installed-plot
	$(PY) bench.py

bench-quick: $(VENV)/.installed-plot
	$(PY) bench.py --quick

roofline: $(VENV)/.installed-plot
	$(PY) bench.py --plot docs/roofline.png

test: $(VENV)/.installed-test
	$(PY) -m pytest -q

info: $(VENV)/.installed-plot
	$(PY) -m cudakit info

tune: $(VENV)/.installed-plot
	$(PY) -m cudakit tune

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
