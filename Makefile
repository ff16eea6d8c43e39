# Two commands a newcomer pastes on a fresh machine (README):
#   make setup diagnose MODEL=resnet50
#   make test
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch/torchvision pair to install. Override for your CUDA version, e.g.
#   make setup TORCH_SPEC="torch torchvision --index-url https://download.pytorch.org/whl/cu126"
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
MODEL ?= resnet50
BATCH ?=
STEPS ?=
MODE ?= auto
ARGS ?=

.PHONY: setup diagnose test test-slow test-gpu lint examples clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

diagnose: setup
	$(BIN)/hybrid diagnose --model $(MODEL) --mode $(MODE) $(if $(BATCH),--batch-size $(BATCH)) $(if $(STEPS),--steps $(STEPS)) $(ARGS)

# One worker per core, each test file in one worker (its module fixtures run once), the longest files first
# (tests/conftest.py HEAVY_FIRST; xdist's own order started them last); a committed trace's parse and a
# committed capture's analysis are made once per session and shared by both workers (tests/conftest.py). On
# the 2-core, 24 GiB box on 2026-12-04, another engineer's work on it at times, 1251 passed and 14 skipped:
# 9 min 24 s (1023 CPU s) before that sharing and the shared runs of test_cli, test_distributed and
# test_hostile_io, 7 min 51 s (888 CPU s) after (12-02's 6 min 6 s, 675 CPU s, came from a quieter box).
# Later that day, with this session's new tests, alone on the box: 8 min 17 s (937 CPU s, 1275 tests) warm,
# 9 min 45 s in a fresh clone's .ci/run (1279 passed, 10 skipped). The floor on 2 cores is about half the CPU
# seconds: most of them are subprocesses that each import torch (1.6 to 2.1 s of CPU) to run a script or the
# CLI. Started from a script with SIGINT ignored (a background job), the two Ctrl-C tests lost their signal
# and waited out 60 s each: 11 min 13 s (904 CPU s), 1302 passed and those 2 failed; with their child started
# at SIGINT's default (tests/hybrid_cli.py interruptible), the same way: 7 min 13 s (810 CPU s), 1304 passed,
# 10 skipped (2 failed that fail on this main too: test_examples and test_precision, fixtures behind the
# analyzer), 2026-12-04 on the quiet box. The 5-minute goal is not met: the test files' times sum to 838 s
# and both workers end within 13 s of each other, so what is left is CPU in torch-importing subprocesses
# that no two tests share.
test: setup
	$(BIN)/python -m pytest -q -m "not gpu and not slow" -n auto --dist loadfile --no-loadscope-reorder

# The end-to-end runs `make test` leaves out (marked slow): each repeats a whole workload run (four verified
# runs of one loop, a CPU torch.compile in every pass, a second signal, a straggling rank) whose logic a
# default test covers on real data or a shorter run. .ci/run runs both.
test-slow: setup
	$(BIN)/python -m pytest -q -m "slow and not gpu" -n auto --dist loadfile --no-loadscope-reorder

# On a machine with an NVIDIA GPU, nsys and ncu.
test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu

lint: setup
	$(BIN)/ruff check hybrid nsight tests benchmarks tools
	$(BIN)/ruff format --check hybrid nsight tests benchmarks tools
	$(BIN)/python tools/mypy_ratchet.py

# examples/resnet50 (and the README's copy of its report) rendered again from its committed H200 capture by
# this checkout's analyzer; tests/test_examples.py fails until this is run after a change of what it renders.
examples: setup
	$(BIN)/python examples/render.py

clean:
	rm -rf build dist *.egg-info hybrid-runs hybrid-reports .pytest_cache
