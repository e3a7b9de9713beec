import numpy as np
import pytest

from psgd import backend, mpi


def test_numpy_backend_by_name_and_by_environment(monkeypatch):
    assert backend.get_backend("numpy").xp is np
    monkeypatch.setenv("PSGD_BACKEND", "numpy")
    b = backend.get_backend()
    assert b.xp is np and not b.is_gpu and b.name == "numpy"


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ValueError, match="auto, numpy, cupy"):
        backend.get_backend("tpu")


def test_auto_falls_back_to_numpy_and_cupy_without_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(backend, "_cupy_with_devices", lambda: None)
    assert backend.get_backend("auto").xp is np
    with pytest.raises(RuntimeError, match="CuPy or a CUDA device is not available"):
        backend.get_backend("cupy")


def test_device_id_lists():
    assert backend.parse_device_ids("0,2, 3") == [0, 2, 3]
    assert backend.parse_device_ids(None) is None and backend.parse_device_ids("") is None
    with pytest.raises(ValueError, match="comma-separated"):
        backend.parse_device_ids("0,x")


def test_cuda_aware_can_be_forced(monkeypatch):
    monkeypatch.setenv("PSGD_CUDA_AWARE", "1")
    assert mpi.cuda_aware()
    monkeypatch.setenv("PSGD_CUDA_AWARE", "0")
    assert not mpi.cuda_aware()


def test_host_buffers_go_to_mpi_directly():
    from psgd.buffers import FlatBuffer
    buf = FlatBuffer.pack([np.ones(3, np.float32)])
    assert mpi.Exchange(None, buf).direct
