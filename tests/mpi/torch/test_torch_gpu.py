"""GPU twins of the psgd.torch tests: a CUDA model shares its flat buffer with
CuPy through DLPack (no host copy of the model), and ends like the NumPy
path. Skipped without CuPy, a CUDA torch and a device."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import psgd.torch  # noqa: E402
from torch_models import cnn  # noqa: E402
from torch_drive import (drive, grad_step_numpy, grad_step_torch,  # noqa: E402
                         model_step_numpy, model_step_torch)

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def device():
    return torch.device("cuda", 0)


def test_cuda_parameters_share_memory_with_cupy(comm):
    model = cnn(seed=comm.rank).to(device())
    sync = psgd.torch.create("bsp", model, comm=comm)
    assert isinstance(sync.buffer.data, cupy.ndarray)
    assert next(model.parameters()).data_ptr() == sync.buffer.data.data.ptr
    sync.buffer.data[:] = 3.0
    cupy.cuda.get_current_stream().synchronize()
    assert all(bool((p == 3.0).all()) for p in model.parameters())


@pytest.mark.parametrize("name", ["bsp", "bmuf", "easgd"])
def test_cuda_model_averaging_matches_numpy(comm, name):
    got, expected = drive(comm, name, model_step_torch, model_step_numpy, device=device())
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_cuda_syncgrad_matches_numpy(comm):
    got, expected = drive(comm, "syncgrad", grad_step_torch, grad_step_numpy, device=device())
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
