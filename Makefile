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

# The suites start a few hundred Python processes (the CLI, the injector, the scripts it runs), each importing
# this checkout's modules: where the environment sets PYTHONDONTWRITEBYTECODE (this box and CI's do) each one
# compiled them from source again, 0.7-0.9 s of CPU of the 2.8 s a `hybrid report` of a committed capture took.
# The tests write the bytecode cache (__pycache__, ignored by git) and read it from then on.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE

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
# (tests/conftest.py HEAVY_FIRST); a committed trace's parse and a committed capture's analysis are made once
# per session and shared by both workers (tests/conftest.py). Most of the CPU is subprocesses that each import
# torch (1.6 to 2.1 s of CPU) to run a script or the CLI, so the default suite leaves out the end-to-end runs
# marked slow. On the 2-core, 24 GiB box (2026-12-07), a fresh clone's .ci/run: 1327 passed in 4 min 23 s
# (5:27 an hour later at a62352a, the box as quiet: its noise; 1341 passed in 3:08 at 16f04b2, then 126 slow
# in 3:45, the whole .ci/run with its install in about 8 minutes), about 550 s of CPU, 93% of both cores:
# 215 s of analysis in the workers, the rest subprocesses (44 injected scripts 102 s, 95 `hybrid report`
# runs 80 s).
test: setup
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not gpu and not slow" -n auto --dist loadfile --no-loadscope-reorder

# The end-to-end runs `make test` leaves out (marked slow): each runs whole workloads again for one more case
# (four verified runs of one loop, a CPU torch.compile in every pass, a second signal, a straggling or
# crashing rank, a script too short for its windows, the workload stopped or killed, a stuck tool) or times
# 1M synthetic kernels. .ci/run runs both (125 passed in 5 min 30 s on that box).
test-slow: setup
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "slow and not gpu" -n auto --dist loadfile --no-loadscope-reorder

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
