# Transformers, hands-on: `make help` lists the targets.
# Everything runs in a local virtual environment (.venv) that `make setup` creates.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# TORCH=cpu installs torch from PyTorch's CPU-only wheel index (no CUDA libraries on Linux);
# another value names another of its indexes (e.g. TORCH=cu128). Empty: pip's default index.
TORCH  ?=
TORCH_INDEX   := https://download.pytorch.org/whl/$(TORCH)
TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements.txt)
STAMP  := $(VENV)/.installed$(if $(TORCH),-torch-$(TORCH))
REPO   ?=
# make site: SOLUTIONS=0 leaves the solutions out (a student site), HUB adds nbgitpuller links
SITE_DIR  ?= site
SOLUTIONS ?= 1
HUB       ?=
# make test: pytest-xdist workers (auto: one per core, at most 4; each imports torch)
TEST_JOBS ?= auto
# make check-notebooks/check-samples: notebooks run at a time. 1: one after another, each with
# every core (the budgets' setting); N: N at once, one thread each (CI; times then not budgets').
NB_JOBS ?= 1
NBVAL := --nbval-lax --nbval-current-env -p no:cacheprovider
nb_jobs = $(if $(filter-out 1,$(NB_JOBS)),OMP_NUM_THREADS=1 MKL_NUM_THREADS=1,) $(BIN)/python -m pytest $(if $(filter-out 1,$(NB_JOBS)),-n $(NB_JOBS) --dist loadfile --no-loadscope-reorder,)

.DEFAULT_GOAL := help

# Paths given on the command line (DIR, SUBMISSIONS, OUT, POINTS, MANUAL, JSON) reach the
# recipes through the environment, written "$$DIR": spaces, accents and quotes pass intact.
# A relative one is read where make runs; `make -C dir` runs in dir, so a relative path typed in
# another directory is refused in one line rather than read in the wrong folder.
export COURSE_CALLER_DIR := $(PWD)
typed_here = $(foreach v,$(1),case "$$$(v)" in (""|/*) ;; (*) [ -z "$$COURSE_CALLER_DIR" ] || [ "$$(cd "$$COURSE_CALLER_DIR" 2>/dev/null && pwd -P)" = "$$(pwd -P)" ] || { echo "$(v)=$$$(v) is a relative path, but make runs in $$(pwd), not where you typed it ($$COURSE_CALLER_DIR): give $(v) as an absolute path, e.g. $(v)=\"$$COURSE_CALLER_DIR/$$$(v)\"" >&2; exit 2; };; esac;)
.PHONY: bench help setup lab check check-static check-notebooks check-samples check-grading test lint solutions exercises data badges progress grade report sandbox release gradescope clean site check-site diagrams

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

setup: $(STAMP) ## Create .venv and install the pinned requirements (TORCH=cpu: CPU-only torch)

$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11 not found: install it or run 'make setup PYTHON=/path/to/python3.11'"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH),$(BIN)/python -m pip install --quiet --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION))
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)
	@echo "Environment ready in $(VENV)."

lab: setup ## Open JupyterLab on notebooks/ (DIR=solutions: another folder; LAB_ARGS: more options)
	@test -d "$(or $(DIR),notebooks)" || { echo "DIR=$(DIR) is not a folder of this repository (try DIR=solutions)"; exit 1; }
	$(BIN)/jupyter lab --notebook-dir="$(or $(DIR),notebooks)" --LabApp.app_settings_dir="$(CURDIR)/jupyter-config/lab-settings" $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

check: check-static test check-notebooks ## Run every test: generated files, lint, the fast tests (make test), all solution notebooks (nbval)

check-static: setup lint ## Generated files up to date, then lint (the first part of make check)
	$(BIN)/python -m course.tooling.nbtools check

check-notebooks: setup ## Every solution notebook top to bottom under nbval (the last part of make check) [NB_JOBS=2: two at once]
	$(nb_jobs) solutions $(NBVAL) --durations=15

check-grading: setup ## The slow end-to-end grading tests: whole submissions graded, progress on full notebooks
	$(BIN)/python -m pytest tests -m slow -p no:cacheprovider --durations=20

check-samples: setup ## Run notebooks 06-10 as a laptop with no network and no data would: on the bundled samples [NB_JOBS=2]
	env -u COURSE_DATA_MIRROR COURSE_OFFLINE=1 HF_HUB_OFFLINE=1 COURSE_DATA_DIR="$$(mktemp -d)" \
	  $(nb_jobs) solutions/06_*.ipynb solutions/07_*.ipynb solutions/08_*.ipynb solutions/09_*.ipynb solutions/10_*.ipynb \
	  $(NBVAL)

test: setup ## Only the fast tests (no notebooks), one worker per core (TEST_JOBS=1: in one process)
	$(BIN)/python -m pytest tests -q -m "not slow" -n $(TEST_JOBS) --maxprocesses=4

lint: setup ## Lint the package, the tests and the notebooks with ruff
	$(BIN)/ruff check course tests solutions notebooks conftest.py
	$(BIN)/ruff format --check course

bench: setup ## Time the course's code against what you'd pick instead: its loop vs Trainer, its layers vs nn.Transformer
	@$(call typed_here,JSON)
	$(BIN)/python -m course.tooling.bench $(if $(JSON),--json "$$JSON",)

solutions: setup ## Execute solutions/ and save them as readers see them (figures, final bars); NB="05 07" for some
	$(BIN)/python -m course.tooling.refresh $(NB)

diagrams: setup ## Render docs/diagrams/*.py and embed them in the solutions (then make exercises)
	$(BIN)/python docs/diagrams/render.py
	$(BIN)/python -m course.tooling.nbtools generate

exercises: setup ## Regenerate notebooks/ and course/nn.py from solutions/
	$(BIN)/python -m course.tooling.nbtools generate

data: setup ## Download (or copy from $$COURSE_DATA_MIRROR) and prepare every dataset
	$(BIN)/python -m course.data prepare

badges: setup ## Point the Colab badges at another repository: make badges REPO=owner/name
	@test -n "$(REPO)" || { echo "usage: make badges REPO=owner/name"; exit 1; }
	$(BIN)/python -m course.tooling.nbtools badges --repo $(REPO)

progress: setup ## Your progress, graded as make grade would (DIR=notebooks, JOBS=2 by default)
	@$(call typed_here,DIR)
	$(BIN)/python -m course.classroom progress --dir "$${DIR:-notebooks}" -j $(or $(JOBS),2)

grade: setup ## Grade a class: make grade SUBMISSIONS=dir|zip OUT=dir [JOBS=1] [TIMEOUT=s] [POINTS=json] [MANUAL=csv]
	@test -n "$$SUBMISSIONS" -a -n "$$OUT" || { echo "usage: make grade SUBMISSIONS=dir OUT=dir [JOBS=N] [TIMEOUT=seconds per exercise] [POINTS=file.json] [MANUAL=file.csv]"; exit 1; }
	@$(call typed_here,SUBMISSIONS OUT POINTS MANUAL)
	$(BIN)/python -m course.classroom grade --submissions "$$SUBMISSIONS" --out "$$OUT" -j $(or $(JOBS),1) $(if $(TIMEOUT),--timeout $(TIMEOUT),) $(if $(POINTS),--points "$$POINTS",) $(if $(MANUAL),--manual "$$MANUAL",)
	$(BIN)/python -m course.classroom verify "$$OUT"
	@echo "What the class got wrong, by named mistake: make report OUT=\"$$OUT\" [NAMES=1]" >&2

report: setup ## What a graded class got wrong, by named mistake: make report OUT=dir [NAMES=1]
	@test -n "$$OUT" || { echo "usage: make report OUT=<the folder make grade wrote> [NAMES=1: name the students]"; exit 1; }
	@$(call typed_here,OUT)
	$(BIN)/python -m course.grading.report "$$OUT" $(if $(filter 1,$(NAMES)),--names,)

sandbox: setup ## How student code is fenced in on this machine (needs bubblewrap: apt-get install bubblewrap)
	$(BIN)/python -m course.grading.sandbox

release: setup ## A student copy: make release DIR=path UPTO=NN [REPO=owner/name] [SITE=1 [HUB=url]]
	@test -n "$$DIR" -a -n "$(UPTO)" || { echo "usage: make release DIR=path UPTO=NN [REPO=owner/name] [SITE=1: with its website] [HUB=url]"; exit 1; }
	@$(call typed_here,DIR)
	$(BIN)/python -m course.tooling.release "$$DIR" $(UPTO) $(if $(REPO),--repo $(REPO),) $(if $(filter 1,$(SITE)),--site $(if $(HUB),--hub $(HUB),),)

gradescope: setup ## Write dist/autograder.zip for Gradescope [ONLY=03,04] [POINTS=points.json] [TIMEOUT=s]
	@$(call typed_here,POINTS)
	$(BIN)/python -m course.classroom gradescope --out dist/autograder.zip $(if $(ONLY),--only $(ONLY),) $(if $(POINTS),--points "$$POINTS",) $(if $(TIMEOUT),--timeout $(TIMEOUT),)

site: setup ## Build the website into site/ from the stored notebooks [SOLUTIONS=0] [HUB=url] [REPO=o/n]
	$(BIN)/python docs/site/build.py --out "$(SITE_DIR)" $(if $(filter 0,$(SOLUTIONS)),--no-solutions,) $(if $(HUB),--hub $(HUB),) $(if $(REPO),--repo $(REPO),)

# The browser test opens every page of two sites in headless Chromium (Debian's chromium and
# chromium-driver): the site above and a student site with nbgitpuller links. It clicks a copy
# button and reads the clipboard, opens each folded setup cell, compares each page's outline
# with its notebook's headings, screenshots every figure in the light and the dark scheme, and
# searches (one hit per notebook, no raw TeX); a probe site of transparent drawings is built too.
# SCREENSHOTS=docs also writes docs/site-landing.png and docs/site-notebook.png.
check-site: site ## Build the site (and a student one), then open every page in headless Chromium
	$(BIN)/python docs/site/build.py --out build/site-student --no-solutions --hub https://hub.example.edu
	COURSE_SITE_DIRS="$(SITE_DIR):build/site-student" $(if $(SCREENSHOTS),COURSE_SITE_SCREENSHOTS=$(SCREENSHOTS),) \
	  $(BIN)/python -m pytest tests/test_site.py \
	  tests/test_report.py::test_the_page_shows_its_figures_in_light_and_dark_without_a_network -p no:cacheprovider -q

clean: ## Remove the environment, caches and prepared data (never your notebooks)
	rm -rf $(VENV) .pytest_cache .ruff_cache data/prepared data/downloads
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
