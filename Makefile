# One entry point for a new machine: `make demo` and `make test` each create the
# virtual environment and install everything they need (every framework).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# The test environment: CPU TensorFlow (1.3 GB), JAX (0.4 GB), torch 2.9.0 with
# torch_xla 2.9.0 (about 7 GB, torch pulls the CUDA libraries), TensorBoard/XProf.
EXTRAS := test,jax,tensorflow-cpu,torch-xla,tensorboard

.PHONY: setup test test-fast lint browser demo html-check tensorboard-check bench clean

$(BIN)/.installed: pyproject.toml tpumem/xplane/event_kernels.c tpumem/snapshots/pickle_walk.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --progress-bar off -e ".[$(EXTRAS)]"
	# libtpu (700 MB) for --tpu, where only tpumem's compile finds it: the
	# profiled JAX scripts of the tests do not load it.
	$(BIN)/tpumem install-libtpu
	touch $@

setup: $(BIN)/.installed

# The browser tests need Debian's Chromium; installed here where it is missing
# (as root, as on CI), so that they run rather than fail for want of it.
browser:
	@command -v chromium >/dev/null || { \
		apt-get install -y -q chromium >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }
	@chromium --version 2>/dev/null

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: setup lint browser
	$(BIN)/python -m pytest

# The fast lanes (tests/lanes.py): in-process tests and the CLI on recorded
# traces, no framework, no browser, no fuzzing or emulator (the slow lane);
# about 26 s on two cores.
test-fast: setup
	$(BIN)/python -m pytest -m "unit or cli"

demo: setup
	rm -rf demo && mkdir -p demo
	cd demo && TF_CPP_MIN_LOG_LEVEL=2 ../$(BIN)/tpumem compare \
		"../examples/tf_transformer.py --steps 30" \
		"../examples/jax_transformer.py --steps 30" \
		"../examples/torch_xla_transformer.py --steps 30" \
		"../examples/torch_transformer.py --steps 30" --html compare.html

# Needs Debian's chromium (apt install chromium): opens the demo's pages headless,
# fails on any console message, and leaves a screenshot beside each page.
html-check: demo
	$(BIN)/tpumem report demo/torch_xla_transformer.tpumem -o demo/torch_xla_transformer.html
	$(BIN)/python tests/browser/chromium_check.py demo/compare.html demo/torch_xla_transformer.html

# Needs chromium and npm (it installs playwright-core beside the check): exports the
# demo's runs, serves them with a real TensorBoard, opens XProf's Memory Profile
# tool for each and leaves a screenshot (demo/tb_<run>.png).
tensorboard-check: demo
	rm -rf demo/tb
	$(BIN)/tpumem export tensorboard demo/tf_transformer.tpumem demo/jax_transformer.tpumem \
		demo/torch_xla_transformer.tpumem --logdir demo/tb
	for run in tf_transformer jax_transformer torch_xla_transformer; do \
		$(BIN)/python tests/browser/tensorboard_check.py demo/tb $$run demo/$$run.tpumem \
			demo/tb_$$run.png || exit 1; \
	done

bench: setup
	$(BIN)/python benchmarks/report_vs_xprof.py
	$(BIN)/python benchmarks/analysis_scale.py
	$(BIN)/python benchmarks/profile_overhead.py
	$(BIN)/python benchmarks/profile_overhead.py --example jax_transformer.py
	$(BIN)/python benchmarks/jax_call_cost.py
	$(BIN)/python benchmarks/profile_overhead.py --example torch_xla_transformer.py --steps 40
	$(BIN)/python benchmarks/profile_overhead.py --example torch_transformer.py --steps 80
	$(BIN)/python benchmarks/torch_xla_op_cost.py
	$(BIN)/python benchmarks/fit_gpu.py
	$(BIN)/python benchmarks/compare_html.py
	$(BIN)/python benchmarks/export_tensorboard.py
	$(BIN)/python benchmarks/page_scale.py
	$(BIN)/python benchmarks/profile_overhead.py --example jax_transformer.py --live
	$(BIN)/python benchmarks/profile_overhead.py --example jax_transformer.py --watch
	$(BIN)/python benchmarks/trace_shapes.py
	$(BIN)/python benchmarks/diff_scale.py
	$(BIN)/python benchmarks/run_scale.py
	$(BIN)/python benchmarks/profile_overhead.py --example jax_transformer.py --steps 60 --anchor no-stacks
	$(BIN)/python benchmarks/snapshot_scale.py
	$(BIN)/python benchmarks/snapshot_flood.py
	$(BIN)/python benchmarks/pod_summaries.py
	$(BIN)/python benchmarks/pod_storage.py
	$(BIN)/python benchmarks/fit_vs_aot.py
	$(BIN)/python benchmarks/fit_search.py
	$(BIN)/python benchmarks/fit_larger.py
	$(BIN)/python benchmarks/fit_sweep.py

clean:
	rm -rf $(VENV) demo benchmarks/_work
