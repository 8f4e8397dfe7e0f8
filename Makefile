# EPPO — every user-facing command. `make help` lists them.
PY      := .venv/bin/python
PYTEST  := $(PY) -m pytest
export RAY_AUTH_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false


.PHONY: help install test test-slow test-alfworld-diff test-browser test-gpu test-all lint train eval bench experiment experiment-quick study-report clean gpu-bundle gpu-check

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/' | column -t -s '	'

install:  ## set up everything (Debian packages, .venv, torch CPU, the project, the default model); idempotent
	@bash scripts/install.sh

lint: install  ## ruff over the code and tests
	$(PY) -m ruff check eppo_envs eppo_train tests

test: install lint  ## the default suite (minutes): lint + unit, conformance and tiny-model tests
	$(PYTEST) -q

test-slow: install  ## the slow checks: real default model, full expert sweeps, the quick study
	$(PYTEST) -q -m slow

test-alfworld-diff: install  ## the fast ALFWorld engine vs the stock TextWorld engine on 1,000 trajectories (~30-60 min)
	$(PYTEST) -q -m slow tests/test_alfworld_diff.py

test-browser: install  ## only the headless-Chromium checks (WebShop-Browser; also part of `make test` when chromium is installed)
	$(PYTEST) -q -m browser

test-gpu: install  ## checks that need a CUDA GPU
	$(PYTEST) -q -m gpu

gpu-bundle: install  ## what scripts/gpu_check.sh needs on a bare CUDA machine (gymnasium, tiny model): build/gpu_bundle
	$(PY) -m eppo_train.benchmarks.gpu_check bundle build/gpu_bundle

gpu-check:  ## the GPU check (docs/bench.md); `make gpu-check ARGS=--cpu` is the CPU dry run
	PYTHON=$(if $(wildcard $(PY)),$(PY),python3) bash scripts/gpu_check.sh $(ARGS)

test-all: install lint  ## everything but the GPU checks
	$(PYTEST) -q -m "not gpu"

train: install  ## the main job: expert demos -> SFT warm start -> EPPO on all five tasks, default model, CPU
	$(PY) -m eppo_train.cli pipeline $(ARGS)

eval: install  ## evaluate the latest runs/ checkpoint (or the default model) on all tasks
	$(PY) -m eppo_train.eval --policy latest --tasks all $(ARGS)

bench: install  ## measure env, sandbox, retriever, rollout and learner throughput; writes bench/results.json
	$(PY) -m eppo_train.benchmarks $(ARGS)

experiment: install  ## the EPPO study (the pace testbed, then the suite): runs without a result file in docs/results/study/, then docs/results/study.md (resumable; many hours on CPU)
	$(PY) -m eppo_train.cli study $(ARGS)

experiment-quick: install  ## the same machinery with a tiny model, in minutes (output under runs/study-study-quick/)
	$(PY) -m eppo_train.cli study --quick $(ARGS)

study-report: install  ## rebuild docs/results/study.md and its figures from the committed result files (seconds)
	$(PY) -m eppo_train.cli study-report $(ARGS)

clean:  ## remove caches and build outputs (keeps .venv and runs/)
	rm -rf .pytest_cache .ruff_cache build *.egg-info
