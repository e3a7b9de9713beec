"""Helpers of the device suite (tests/mpi/device)."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load(relative):
    """A test module of the host suite, for its replay helpers."""
    path = os.path.join(HERE, "mpi", relative)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def real_cupy():
    """CuPy and its device count, or (None, 0) without CuPy, driver or device."""
    try:
        import cupy
        return cupy, cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return None, 0


def device_module(kind):
    """('sim' | 'cupy') -> (module, undo); pytest.skip for a missing GPU."""
    import pytest
    if kind == "sim":
        import simcupy
        previous = simcupy.install()
        return simcupy, lambda: simcupy.uninstall(previous)
    module, count = real_cupy()
    if not count:
        pytest.skip("no CUDA device (GPU twin)")
    return module, lambda: None


def device_fixture():
    """A fixture over the simulated device and (when present) a GPU."""
    import pytest

    @pytest.fixture(params=["sim", "cupy"])
    def fixture(request):
        module, undo = device_module(request.param)
        yield module
        module.cuda.Device().synchronize()
        undo()
    return fixture
