# The two README commands: `make train` and `make test`. Both set up first;
# setup is idempotent and takes seconds once done (scripts/setup.sh).
SHELL := /bin/bash
# GPU=1: the NCCL build in .venv-gpu (scripts/setup_gpu.sh). Unset: 1 when nvidia-smi
# lists a GPU, so that on a GPU host every target uses the GPU build untold.
GPU ?= $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && echo 1 || echo 0)
ifeq ($(GPU),1)
VENV ?= $(CURDIR)/.venv-gpu
else
VENV ?= $(CURDIR)/.venv
endif
NP ?= 2
RUN_DIR ?= runs/train
# Open MPI refuses to start as root unless told that this is deliberate (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export PATH := $(VENV)/bin:$(PATH)

.PHONY: setup train test test-fast bench clean

setup:
	@GPU=$(GPU) VENV=$(VENV) bash scripts/setup.sh

# A real 2-process Horovod run on the bundled digits data.
TRAIN_CMD = horovodrun -np $(NP) -H localhost:$(NP) \
  python -m horovod_train --summary_json=$(RUN_DIR)/summary.json
# The ranks drop TensorFlow's C++ start-up lines themselves (horovod_train/console.py);
# horovodrun's own build check prints them from horovodrun's process, so its stderr goes
# through the same filter here (typed by hand, horovodrun shows those few lines). The
# braces make the filter this shell's child, so `wait` can let it write its last lines;
# the exit code is horovodrun's.
train: setup
	@echo '$(TRAIN_CMD)'
	@{ $(TRAIN_CMD); } 2> >(python -m horovod_train.console); status=$$?; wait $$!; exit $$status
	@python -c "import json; s = json.load(open('$(RUN_DIR)/summary.json')); \
	  print('summary: %d ranks, test accuracy %.4f, %.0f samples/s, identical weights on all ranks: %s' % \
	  (s['world_size'], s['test_accuracy'], s['samples_per_sec'], len(set(s['weight_digests'])) == 1))"

# Every tier (this is what CI runs), in one pytest session on 2 workers. A group (a file,
# or the files sharing a session scenario: tests/worker_groups.py) runs in one worker, so
# no scenario launches twice; the unit and tf tests, one at a time, fill the gaps the
# long groups leave. The session prints its 30 slowest tests and its `tiers |` line
# (tests/conftest.py) before its closing line, so a CI log shows where the time went.
test: setup
	python -m pytest -n 2 --dist loadgroup --durations=30 tests

# The fast tiers alone (unit and tf: no test that starts processes), on 2 workers: 90 s
# against 140 s one at a time on 2 cores (docs/testing.md).
test-fast: setup
	python -m pytest -n 2 -m "not slow" tests

# The short version of every benchmark figure (issue 12): tables on stdout, JSON in
# runs/bench/, the plot in docs/benchmarks.png. Full version: python bench/run_all.py
bench: setup
	python bench/run_all.py --short

clean:
	rm -rf runs .pytest_cache build *.egg-info
