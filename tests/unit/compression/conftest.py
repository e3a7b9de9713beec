"""Every quantizer test runs on both passes: NumPy's and the compiled ones
(psgd/compression/compiled.py), which must meet the same contract; the
compiled ones at every size here (jit.MIN_SIZE lowered to 0)."""
import importlib.util

import pytest

PASSES = {"numpy": "numpy", "compiled": "auto"}


@pytest.fixture
def any_size(monkeypatch):
    from psgd import jit
    monkeypatch.setattr(jit, "MIN_SIZE", 0)


@pytest.fixture(autouse=True, params=sorted(PASSES))
def passes(request, setting, any_size):
    if request.param == "compiled" and importlib.util.find_spec("numba") is None:
        pytest.skip("Numba is not installed (the 'fast' extra): the compiled passes")
    setting("PSGD_ACCEL", PASSES[request.param])
    from psgd.compression import compiled
    assert compiled.LOOPS.ready(1) == (request.param == "compiled")
    return request.param
