"""Shared test set-up: the tests folder is importable (serial references,
launch helpers), and MPI tests get a fresh duplicate of COMM_WORLD."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("PSGD_BACKEND", "numpy")


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
