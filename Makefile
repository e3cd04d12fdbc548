# The two commands of the README:  make book  (build the website)  and  make test  (everything CI runs).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(abspath $(VENV))/bin
export PATH := $(abspath $(BIN)):$(PATH)
# one thread policy for the whole book: OpenBLAS single-threaded (see rcutil/__init__.py)
export OPENBLAS_NUM_THREADS := 1
export PYTHONHASHSEED := 0
# the test command runs two notebooks or test workers side by side: one torch thread each
test unit nbval build-ci site: export RCUTIL_TORCH_THREADS := 1
# data from the shared folder when it is there; otherwise rcutil's cache or download
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)/SHA256SUMS),)
export RCUTIL_DATA_DIR ?= $(SHARED_DATA)
endif
# experiment results shared by the chapters and the report (see rcutil.experiments.cached)
export RCUTIL_RESULTS_DIR ?= $(abspath _build/results)
NBDIR    ?= _build/nbval
CHAPTERS ?= $(wildcard book/*.md)
BOOK_ROOT ?= .

.PHONY: book test install unit nbval build-ci site browser-deps clean

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

install: $(VENV)/.installed

## make book: build the website with the `book` profile, then open _build/html/index.html
book: install
	rm -rf _build/html
	RCUTIL_PROFILE=book $(BIN)/jupyter-book build -W -n --keep-going .
	@echo "Open _build/html/index.html in a browser."

## make test: unit tests, every chapter under nbval, the -W book build, the site in a browser (profile ci)
test: install
	$(MAKE) unit nbval build-ci site

unit:
	RCUTIL_PROFILE=ci $(BIN)/python -m pytest -q -n 2 --ignore=tests/site tests

nbval:
	rm -rf $(NBDIR) && mkdir -p $(NBDIR)
	for md in $(CHAPTERS); do \
	  grep -q "format_name: myst" $$md || continue; \
	  $(BIN)/jupytext --quiet --to ipynb --output $(NBDIR)/$$(basename $${md%.md}).ipynb $$md || exit 1; \
	done
	cd $(NBDIR) && RCUTIL_PROFILE=ci $(BIN)/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider \
	  --nbval-lax --nbval-current-env --rootdir=. *.ipynb

build-ci:
	rm -rf $(BOOK_ROOT)/_build/html
	RCUTIL_PROFILE=ci $(BIN)/jupyter-book build -W -n --keep-going $(BOOK_ROOT)

## Debian's chromium and chromium-driver for the site test, installed when missing
browser-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; \
	fi

## the built site in headless Chromium
site: browser-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/site

clean:
	rm -rf _build
