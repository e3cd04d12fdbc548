# The two commands of the README:  make book  (build the website)  and  make test
# (everything CI runs). Contributors: make lint, make chapter NAME=sst2, make lab (see
# CONTRIBUTING.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(abspath $(VENV))/bin
export PATH := $(abspath $(BIN)):$(PATH)
# one thread policy for the whole book: OpenBLAS single-threaded (see rcutil/threads.py;
# the entry points set it, rcutil/entry.py; a kernel of make lab gets it from here)
export OPENBLAS_NUM_THREADS := 1
export PYTHONHASHSEED := 0
# chapters execute two at a time (and unit tests run on two workers): one torch thread each
export RCUTIL_TORCH_THREADS ?= 1
# data from a data folder beside the clone (../shared/data) when there is one; otherwise
# rcutil's cache or a download
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)/SHA256SUMS),)
export RCUTIL_DATA_DIR ?= $(SHARED_DATA)
endif
# experiment results shared by the chapters and the report (see rcutil/results.py)
export RCUTIL_RESULTS_DIR ?= $(abspath _build/results)

# PROFILE picks the sizes; every profile builds into its own folder _build/<profile>, with its
# own executed notebooks, so that switching profile always executes the chapters again.
PROFILE   ?= ci
BOOK_ROOT ?= .
OUT       ?= $(BOOK_ROOT)/_build/$(PROFILE)
CHAPTERS  ?= $(wildcard $(BOOK_ROOT)/book/*.md)
JB_CACHE   = $(OUT)/_build/.jupyter_cache

# The arguments, checked before any recipe runs or creates anything; the recipes quote
# them as well (tests/test_make.py). PROFILE is one of the profiles; every word of
# CHAPTERS names a .md file in $(BOOK_ROOT)/book, and reaches the runner through the
# environment, never through the shell; NAME (make chapter) is the file name of a
# chapter in book/, without .md, made of letters, digits, - and _ only; BOOK_ROOT and
# OUT hold no quote.
PROFILES := ci book paper
_PROFILE_FIX = ($(origin PROFILE)): set PROFILE to one of $(PROFILES)
ifneq ($(words $(PROFILE)),1)
$(error PROFILE='$(PROFILE)' is not one profile $(_PROFILE_FIX))
else ifeq ($(filter $(PROFILES),$(PROFILE)),)
$(error unknown PROFILE=$(PROFILE) $(_PROFILE_FIX))
endif
ifneq ($(findstring ',$(BOOK_ROOT)$(OUT)),)
$(error BOOK_ROOT='$(BOOK_ROOT)' or OUT='$(OUT)' holds a quote: name folders without one)
endif
_NO_FILE = $(strip $(foreach c,$(CHAPTERS),$(if $(wildcard $(c)),,$(c))))
ifneq ($(_NO_FILE),)
$(error CHAPTERS names no file $(_NO_FILE): list chapter files such as book/model.md)
endif
_BOOK_DIR := $(abspath $(BOOK_ROOT)/book)
_OUTSIDE = $(strip $(foreach c,$(CHAPTERS),$(if \
             $(filter $(_BOOK_DIR)/%.md,$(abspath $(c))),,$(c))))
ifneq ($(_OUTSIDE),)
$(error CHAPTERS names $(_OUTSIDE), not a .md file in $(BOOK_ROOT)/book: list chapter \
        files such as book/model.md)
endif
_SAFE := a b c d e f g h i j k l m n o p q r s t u v w x y z \
         A B C D E F G H I J K L M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 _ -
_rest = $(wordlist 2,$(words $(1)),$(1))
# what is left of $(1) once every character listed in $(2) is removed from it
_drop = $(subst $(firstword $(2)),,$(1))
_unsafe = $(if $(2),$(call _unsafe,$(call _drop,$(1),$(2)),$(call _rest,$(2))),$(1))
_NAME_FIX = NAME is a file name in book/ without .md, one of \
            $(sort $(basename $(notdir $(wildcard book/*.md))))
ifneq ($(filter chapter,$(MAKECMDGOALS)),)
ifeq ($(strip $(NAME)),)
$(error usage: make chapter NAME=sst2 [PROFILE=ci]; $(_NAME_FIX))
else ifneq ($(words $(NAME)),1)
$(error NAME='$(NAME)' is not one chapter: $(_NAME_FIX))
else ifneq ($(call _unsafe,$(NAME),$(_SAFE)),)
$(error NAME='$(NAME)' has characters other than letters, digits, - and _: $(_NAME_FIX))
else ifeq ($(wildcard book/$(NAME).md),)
$(error no chapter book/$(NAME).md: $(_NAME_FIX))
endif
endif

.PHONY: book test install lint unit execute build site timings chapter lab browser-deps clean mutate weaken

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

install: $(VENV)/.installed

## make book: the website with the `book` profile, in _build/book/_build/html (also linked as _build/html)
book: install
	$(MAKE) --no-print-directory execute build timings PROFILE=book
	ln -sfn book/_build/html _build/html
	@echo "Open _build/html/index.html in a browser."

## make test: lint, unit tests, every chapter executed once, the -W book build, the site in a browser (profile ci)
test: install
	$(MAKE) --no-print-directory lint unit
	$(MAKE) --no-print-directory execute build site timings PROFILE=ci

lint:
	$(BIN)/ruff check .
	$(BIN)/nbqa ruff book/*.md

unit:
	RCUTIL_PROFILE=ci $(BIN)/python -m pytest -q -n 2 --ignore=tests/site tests

## every chapter executed once, two at a time; the outputs go to the build's cache (a cell that raises fails here)
# the chapter files travel in CHAPTER_FILES: the shell splits it into words (set -f: no
# globbing) and never reads a quote or a command in a name
execute: export CHAPTER_FILES = $(wildcard $(CHAPTERS))
execute:
	rm -rf '$(JB_CACHE)'
	set -f; RCUTIL_PROFILE='$(PROFILE)' '$(BIN)/python' scripts/execute_chapters.py \
	  --cache '$(JB_CACHE)' -- $$CHAPTER_FILES

## the website from the executed chapters: -W -n, a failing cell or a warning fails it; built
## afresh (Sphinx would keep the page of an unchanged chapter with the outputs of an older run)
build:
	rm -rf '$(OUT)/_build/html' '$(OUT)/_build/.doctrees'
	RCUTIL_PROFILE='$(PROFILE)' '$(BIN)/jupyter-book' build -W -n --keep-going \
	  --path-output '$(OUT)' '$(BOOK_ROOT)'

timings:
	@RCUTIL_PROFILE='$(PROFILE)' '$(BIN)/python' scripts/timings.py \
	  --profile '$(PROFILE)' --chapters '$(OUT)/_build/chapter_seconds.json'

## make chapter NAME=sst2: execute one chapter and build only its page, with the bibliography, in
## _build/<profile>/chapter/<name>; links to other chapters stay plain text there
## (built afresh, as make build: an unchanged page would keep an older run's outputs)
CHAPTER_OUT = _build/$(PROFILE)/chapter/$(NAME)
chapter: install
	rm -rf '$(CHAPTER_OUT)/_build/.jupyter_cache' '$(CHAPTER_OUT)/_build/html' \
	  '$(CHAPTER_OUT)/_build/.doctrees'
	mkdir -p '$(CHAPTER_OUT)'
	printf 'format: jb-book\nroot: book/%s\nchapters:\n  - file: book/bibliography\n' \
	  '$(NAME)' > '$(CHAPTER_OUT)/_toc.yml'
	RCUTIL_PROFILE='$(PROFILE)' '$(BIN)/python' scripts/execute_chapters.py \
	  --cache '$(CHAPTER_OUT)/_build/.jupyter_cache' 'book/$(NAME).md'
	RCUTIL_PROFILE='$(PROFILE)' '$(BIN)/jupyter-book' build -q \
	  --path-output '$(CHAPTER_OUT)' --toc '$(CHAPTER_OUT)/_toc.yml' .
	@echo 'Open $(CHAPTER_OUT)/_build/html/book/$(NAME).html in a browser.'

## make lab: JupyterLab, where book/*.md open as notebooks (jupytext), their kernels with the
## book's thread policy (OpenBLAS on one thread, torch on RCUTIL_TORCH_THREADS); LAB_ARGS="--no-browser --port=8899" to pass options
LAB_ARGS ?=
lab: install
	$(BIN)/python -m pip install --quiet "jupyterlab>=4"
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' \
	  > $(VENV)/share/jupyter/lab/settings/overrides.json
	$(BIN)/python -c "from rcutil.entry import check_main; raise SystemExit(check_main('make lab'))"
	OMP_NUM_THREADS="$$RCUTIL_TORCH_THREADS" \
	  $(BIN)/jupyter lab $$( [ "$$(id -u)" = 0 ] && echo --allow-root ) $(LAB_ARGS) book

## the Chrome or Chromium this machine has, with a matching chromedriver ($CHROME, $CHROMEDRIVER);
## on Debian, apt installs chromium and chromium-driver when missing; elsewhere one line says what to install
browser-deps:
	@$(PYTHON) tests/site/chrome.py --install

## the built site in headless Chrome or Chromium
site: browser-deps
	RCUTIL_SITE_DIR='$(abspath $(OUT)/_build/html)' '$(BIN)/python' -m pytest -q \
	  -n 2 -p no:cacheprovider tests/site

clean:
	rm -rf _build

## make mutate: an audit (not part of make test), mutation testing of the theory modules
## of [tool.mutmut.modules], each with its own tests: the score per module and every
## survivor with its reason from tests/mutation/SURVIVORS.md; fails only on an
## unexplained survivor
mutate: install
	@$(BIN)/python -c "import mutmut" 2>/dev/null || \
		$(BIN)/python -m pip install --quiet "mutmut>=3.8,<4"
	$(BIN)/python scripts/mutate.py

## make weaken: each plausible error of the theory code listed in scripts/weaken.py (a
## constant halved, a block composed with another's radii, a cruder measurement, an
## activation let through), applied by syntax tree on a copy: each must fail the tests
weaken: install
	$(BIN)/python scripts/weaken.py
