"""Shared test set-up: the tests folder is importable (serial references,
launch helpers), and MPI tests get a fresh duplicate of COMM_WORLD."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PSGD_BACKEND", "numpy")


def pytest_configure(config):
    """Under mpirun every rank is a pytest of its own, and at the end each
    one prunes the same /tmp/pytest-of-USER (its numbered folders and the
    pytest-current link): two ranks unlinking the link at once ended a
    passing run with FileNotFoundError (Open MPI, np 5). So each rank gets
    a root of its own, pruned by it alone."""
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
    if rank is None or os.environ.get("PYTEST_DEBUG_TEMPROOT") or config.option.basetemp:
        return
    import tempfile
    root = os.path.join(tempfile.gettempdir(), "psgd-tests-rank%s" % rank)
    os.makedirs(root, exist_ok=True)
    os.environ["PYTEST_DEBUG_TEMPROOT"] = root


def pytest_addoption(parser):
    parser.addoption("--first-case-only", action="store_true",
                     help="run each parametrized test's first selected case only")


@pytest.hookimpl(trylast=True)     # after -m has deselected what it does
def pytest_collection_modifyitems(config, items):
    """--first-case-only: the Open MPI half of make test runs one case of a
    parametrized job. The cases vary the algorithm or the input, which is
    psgd's Python; what the MPI library adds (ranks starting, failing and
    ending together) is the same in each, and tests/mpi runs every
    algorithm under both libraries."""
    if not config.getoption("--first-case-only"):
        return
    seen, keep, drop = set(), [], []
    for item in items:
        test = item.nodeid.split("[")[0]
        (drop if test in seen else keep).append(item)
        seen.add(test)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def comm():
    from mpi4py import MPI
    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


@pytest.fixture
def setting():
    """setting(NAME, value): a PSGD_* setting for this test (psgd.settings;
    None: its default), the previous value back after it."""
    from psgd import settings
    saved = []
    yield lambda name, value: saved.append((name, settings.set(name, value)))
    for name, old in reversed(saved):
        settings.set(name, old)


@pytest.fixture
def sim():
    """The simulated device (tests/simcupy), fresh, as psgd's cupy backend."""
    import simcupy
    previous = simcupy.install()
    yield simcupy
    simcupy.uninstall(previous)
