# The two commands: `make demo` and `make test` (README). Both create/update .venv,
# install the package with its extras and build the native code first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
NATIVE := nvtx_plugins_tf/_native/.built
NATIVE_SOURCES := $(wildcard cc_ops/*/*.cc cc_ops/*/*.h) build_tools/build_native.py
PYTEST_ARGS ?=
# The public modules whose docstring examples run with the tests.
DOCTEST_MODULES := nvtx_plugins_tf/_paths.py nvtx_plugins_tf/_signals.py nvtx_plugins_tf/recorder/_arrays.py nvtx_plugins_tf/ops/__init__.py nvtx_plugins_tf/ops/ranges.py nvtx_plugins_tf/recorder/reports/names.py nvtx_plugins_tf/tf_ops_annotation.py nvtx_plugins_tf/viewer.py nvtx_plugins_tf/keras/layers.py nvtx_plugins_tf/keras/wrappers.py nvtx_plugins_tf/keras/callbacks.py nvtx_plugins_tf/hooks.py nvtx_plugins_tf/_host_ranges.py nvtx_plugins_tf/recorder/analysis/sketch.py nvtx_plugins_tf/recorder/analysis/rank_result.py nvtx_plugins_tf/recorder/nsys_inputs/ranges.py nvtx_plugins_tf/recorder/watch/session.py nvtx_plugins_tf/recorder/watch/jsonl.py

.PHONY: all demo demo-ranks test bench native clean nsys lint sanitize docs pictures compat compat-ci wheel

all: test

$(INSTALLED): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[tf,tf-keras,test,plot,view,watch,web,dask,compare,docs,lint]'
	touch $@

$(NATIVE): $(INSTALLED) $(NATIVE_SOURCES)
	$(PY) build_tools/build_native.py
	touch $@

native: $(NATIVE)

demo: $(NATIVE)
	mkdir -p out
	$(PY) -m nvtx_plugins_tf record -o out/demo --png -- $(PY) examples/keras_example.py
	@echo "trace files: out/demo.json (Perfetto / chrome://tracing), out/demo.sqlite (sqlite3), out/demo.png"

# 8 ranks (examples/train.py, one recording each, one after another; rank 5 reads its data 10x slower), then
# `nvtx-tf analyze` of them all: out/ranks-analysis/ (tables, heatmap.png) and a summary that
# names rank 5 and its Data:read range. About a minute on 2 cores.
demo-ranks: $(NATIVE)
	rm -rf out/ranks out/ranks-analysis
	mkdir -p out/ranks
	for rank in 0 1 2 3 4 5 6 7; do \
	  if [ $$rank = 5 ]; then ms=30; else ms=3; fi; \
	  $(PY) -m nvtx_plugins_tf record -o out/ranks/rank$$rank --export sqlite -- \
	    $(PY) examples/train.py --batch-size 4 --read-ms $$ms > /dev/null || exit 1; \
	done
	$(PY) -m nvtx_plugins_tf analyze out/ranks/*.nvtxrec -o out/ranks-analysis

# The sdist and the wheel a release would upload, into dist/: the wheel holds the recorder, the
# reader and the host library prebuilt, tagged manylinux by auditwheel (the glibc and libstdc++
# this machine has: the oldest its tag claims); docs/install.md. tests/test_install.py does the same.
wheel: $(INSTALLED)
	rm -rf dist
	$(PY) -m build --outdir dist .
	PATH=$(VENV)/bin:$$PATH $(PY) -m auditwheel repair -w dist dist/nvtx_plugins_tf-*-linux_x86_64.whl
	rm dist/nvtx_plugins_tf-*-linux_x86_64.whl
	@ls dist

# Nsight Systems 2024.2.3 (the judge), 2023.4.4 and 2022.4.2 from Debian's archive (the one
# apt's own sources name) into ~/.cache (nothing installed system-wide): the outside judges of
# tests/test_nsys_*.py. `make test` tries it; with CI=true the oracle tests fail instead of
# skipping when it could not be fetched.
nsys:
	$(PYTHON) build_tools/fetch_nsys.py

test: $(NATIVE)
	-$(PY) build_tools/fetch_nsys.py
	$(PY) -m pytest -q --doctest-modules $(DOCTEST_MODULES)
	$(PY) -m pytest -q $(PYTEST_ARGS) tests

# The TensorFlow matrix (docs/install.md#tested-tensorflow-versions): each release in a fresh
# virtualenv under COMPAT_VENVS (about 2.5 GB each), the op library built, the TensorFlow-facing
# tests and README quick starts 1 and 2; the rows go into docs/install.md. COMPAT=... picks releases.
COMPAT_VENVS ?= out/compat/venvs
COMPAT ?=
compat:
	$(PYTHON) build_tools/compat.py --venvs $(COMPAT_VENVS) $(COMPAT)

# CI's part of it (.ci/run): the oldest supported release in full and the others between it and
# the default on the focused subset, gating; tf-nightly reported, not gating. The default release
# (2.21) runs in full in `make test`.
COMPAT_FOCUSED := tensorflow==2.17.1 tensorflow==2.18.1 tensorflow==2.19.1 tensorflow==2.20.0
compat-ci:
	$(PYTHON) build_tools/compat.py --venvs $(COMPAT_VENVS) --no-table tensorflow==2.16.2
	$(PYTHON) build_tools/compat.py --venvs $(COMPAT_VENVS) --focused --no-table $(COMPAT_FOCUSED) --report-only tf-nightly

# The recorder under AddressSanitizer + UndefinedBehaviorSanitizer and ThreadSanitizer: the
# stress program of issue 20 (threads handing ranges over, signals, capture windows, deep
# nesting, segment rotation) and the TSan runs. Both files also run in `make test`.
sanitize: $(NATIVE)
	$(PY) -m pytest -q tests/test_stress.py tests/test_tsan.py

# Every tracked C/C++ file (nothing is vendored: the NVTX headers come from the nvidia-nvtx wheel).
C_SOURCES = $(shell git ls-files '*.c' '*.cc' '*.h')

# (Every extra is installed once, with the package: a second `pip install -e` would rebuild the
# native libraries under a running test.)
lint: $(INSTALLED)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/clang-format --dry-run --Werror $(C_SOURCES)

bench: $(NATIVE)
	$(PY) benchmarks/run_all.py

# The user guide (docs/, mkdocs.yml) into site/, warnings as errors: a broken link or anchor,
# a page missing from the nav or a docstring mkdocstrings cannot read fails the build.
# It needs only the 'docs' extra (mkdocstrings reads the package's source, never imports it): a
# venv of its own, .venv-docs, that installs in seconds, not .venv with TensorFlow.
DOCS_VENV := .venv-docs
DOCS_INSTALLED := $(DOCS_VENV)/.installed
$(DOCS_INSTALLED): pyproject.toml
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q $$($(PYTHON) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))")
	touch $@

docs: $(DOCS_INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

# The timelines in docs/recorder.md, drawn again from fresh recordings (the commands that page
# gives); PICTURES_DIR=elsewhere leaves docs/ alone. About a minute on 2 cores.
PICTURES_DIR ?= docs
pictures: $(NATIVE)
	mkdir -p out/pictures $(PICTURES_DIR)
	$(PY) -m nvtx_plugins_tf record -o out/pictures/keras_example --png-window 1:2 -- $(PY) examples/keras_example.py
	$(PY) -m nvtx_plugins_tf record -o out/pictures/resnet50 --png-window 1:3 -- $(PY) examples/auto_annotate.py --model resnet50 --steps 4 --batch-size 32
	$(PY) -m nvtx_plugins_tf record -o out/pictures/resnet50_step --png-window 1:1 -- $(PY) examples/auto_annotate.py --model resnet50 --steps 4 --batch-size 32
	cp out/pictures/keras_example.png $(PICTURES_DIR)/timeline_keras_example.png
	cp out/pictures/resnet50.png $(PICTURES_DIR)/timeline_resnet50.png
	cp out/pictures/resnet50_step.png $(PICTURES_DIR)/timeline_resnet50_step.png

clean:
	rm -rf out build site $(DOCS_VENV) *.egg-info nvtx_plugins_tf/_native/*.so nvtx_plugins_tf/_native/*.json $(NATIVE)
