# tfyard: `make demo` trains on the bundled digits; `make test` runs the whole suite;
# `make docs` builds the docs site into site/ (strictly: a warning or a broken link fails);
# `make matrix` runs the demo and `make quick` on every supported Python and on the lowest
# declared versions (ci/matrix.sh). The demo installs the package alone; tests, lint and
# benchmarks add every extra; the docs add the `docs` extra.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
VERSION := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PACKAGE := $(VENV)/.installed-package-$(VERSION)
EVERYTHING := $(VENV)/.installed-everything-$(VERSION)
DOCS := $(VENV)/.installed-docs-$(VERSION)
PYTEST_ARGS ?=
# `make test` spreads the suite over pytest-xdist workers, each taking the next test when it
# is free (`--dist worksteal`): one a core and one more, since a worker waits on its tests'
# child processes (TensorFlow clusters, servers) a third of the time; PYTEST_WORKERS=0 runs
# it in one process.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
DEMO_ARGS ?=
LEGS ?=
# Installs go through uv, which the venv gets first: the same packages pip would install, in
# ~30 s instead of ~70 s for every extra with a warm cache. ci/matrix.sh passes its own uv.
# Compiled to bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set, an uncompiled
# TensorFlow is compiled again by every process (~4 s of CPU each).
PIP ?= $(BIN)/uv pip
INSTALL := UV_COMPILE_BYTECODE=1 $(PIP) install --quiet --python $(BIN)/python
# The quick slice (`make quick`, ~1 CPU-minute): what differs between versions (compat's
# shims, fused batch norm), the Ray and Spark launch plans, one short training run (its
# outputs, exports and plots), predict's csv, jsonl and parquet, a bucket's copy and a run's
# lease in a bucket (boto3 against moto's S3 server: copies, conditional writes; and
# google-cloud-storage against gcp-storage-emulator), and a tracked run's MLflow client
# against a real `mlflow server`, and a tune study of stand-in trials (Optuna's storage read
# back).
QUICK ?= tests/test_compat.py tests/train/test_fused.py tests/launch/test_ray_optional.py \
    tests/launch/test_spark_plan.py \
    tests/train/test_single_process.py::test_every_output_exists_and_parses \
    tests/train/test_single_process.py::test_exports_reload_with_the_same_predictions \
    tests/train/test_single_process.py::test_plot_writes_curves \
    tests/predict/test_outputs.py::test_each_format_is_written_whole \
    tests/storage/test_s3_data.py::test_a_prefix_is_copied_once_then_kept_equal_to_the_bucket \
    tests/storage/test_s3_runs.py::test_the_bucket_lease_is_one_writer_through_conditional_writes \
    tests/storage/test_gcs.py::test_a_gcs_store_copies_writes_and_refuses_a_run_it_cannot_guard \
    tests/tracking/test_tracker.py::test_a_restart_continues_its_run_and_sends_each_step_once \
    tests/tune/test_search.py::test_a_study_is_optunas_and_names_its_best_run

.PHONY: demo test quick gpu docs matrix lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv

$(PACKAGE): $(BIN)/python pyproject.toml
	$(INSTALL) -e .
	rm -f $(VENV)/.installed-package-* && touch $@

$(EVERYTHING): $(BIN)/python pyproject.toml
	$(INSTALL) -e '.[test,spark,ray,dev,parquet,cloud,mlflow,optuna]'
	rm -f $(VENV)/.installed-* && touch $(PACKAGE) $@

$(DOCS): $(PACKAGE)
	$(INSTALL) -e '.[docs]'
	touch $@

demo: $(PACKAGE)
	$(BIN)/tfyard demo $(DEMO_ARGS)

lint: $(EVERYTHING)
	$(BIN)/ruff check src tests examples benchmarks ci

test: lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

quick: $(EVERYTHING)
	$(BIN)/python -m pytest -q -p no:cacheprovider \
	    -m 'not cluster and not spark and not ray and not slow' $(QUICK)

# mkdocs.yml: the pages in docs/, the API pages read from src/'s docstrings without importing
# (NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2, which the docs extra excludes)
docs: $(DOCS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The GPU slice, on a machine with a GPU and the `gpu` extra (tensorflow[and-cuda]):
# bfloat16 training with XLA, a resume, the export alike on GPU and CPU; skipped without one.
gpu: $(EVERYTHING)
	$(INSTALL) -e '.[gpu]'
	$(BIN)/python -m pytest -q -p no:cacheprovider -m gpu tests/gpu

matrix:
	bash ci/matrix.sh $(LEGS)

bench: $(EVERYTHING)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) output site build/matrix .pytest_cache .ruff_cache
