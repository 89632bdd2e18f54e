# `make bench` and `make test` each set up .venv (once) and run: the two commands the README gives.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

# The CUDA major whose CuPy wheel (cudakit[cuda12] / cudakit[cuda13]) and, for the tests, NVRTC go in .venv: the
# driver's, from nvidia-smi's "CUDA Version: 13.0"; 12 where there is no driver (CI). Override: make bench CUDA=13.
ifeq ($(origin CUDA),undefined)
CUDA := $(or $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1),12)
endif

# What each use installs besides cudakit itself: the CuPy of that major, then the tests' NVRTC or matplotlib.
EXTRAS_test = cuda$(CUDA),test$(CUDA)
EXTRAS_plot = cuda$(CUDA),plot

.PHONY: bench bench-quick roofline test info tune clean

# One stamp per (CUDA major, use), so a second run installs nothing. One CuPy per venv: a .venv set up for the
# other major (or before the major was recorded) is made anew rather than given a second CuPy.
$(VENV)/.installed-cuda$(CUDA)-%: pyproject.toml
	$(if $(filter 12 13,$(CUDA)),,$(error CUDA=$(CUDA): cudakit has extras for CUDA 12 and 13 only; pass CUDA=12 or CUDA=13))
	@if [ -d $(VENV) ] && [ "$$(cat $(VENV)/.cuda-major 2>/dev/null)" != $(CUDA) ]; then \
		echo "$(VENV) was set up for another CUDA major: making it anew for CUDA $(CUDA)"; rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	echo $(CUDA) > $(VENV)/.cuda-major
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS_$*)]"
	touch $@

bench: $(VENV)/.installed-cuda$(CUDA)-plot
	$(PY) bench.py

bench-quick: $(VENV)/.installed-cuda$(CUDA)-plot
	$(PY) bench.py --quick

roofline: $(VENV)/.installed-cuda$(CUDA)-plot
	$(PY) bench.py --plot docs/roofline.png

test: $(VENV)/.installed-cuda$(CUDA)-test
	$(PY) -m pytest -q

info: $(VENV)/.installed-cuda$(CUDA)-plot
	$(PY) -m cudakit info

tune: $(VENV)/.installed-cuda$(CUDA)-plot
	$(PY) -m cudakit tune

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
