"""GPU twins of the psgd.torch tests: a CUDA model shares its flat buffer with
CuPy through DLPack (no host copy of the model), and ends like the NumPy
path, compressed too. Skipped without CuPy, a CUDA torch and a device."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

import psgd.torch  # noqa: E402
from torch_models import LR, backward_toward, cnn, counts, flat, targets  # noqa: E402
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


@pytest.mark.parametrize("name", ["bmuf", "syncgrad"])
@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_cuda_compressed_sums_match_numpy(comm, name, kind):
    """The residuals on the GPU, the buckets summed from backward's hooks
    (tests/mpi/device/test_device_buckets.py checks the same bit for bit on
    the simulated device). A GPU's kernels may round a last bit differently,
    and 1bit makes a sign of it near 0: all but 1% within 1e-3."""
    step_torch, step_numpy = ((grad_step_torch, grad_step_numpy) if name == "syncgrad"
                              else (model_step_torch, model_step_numpy))
    got, expected = drive(comm, name, step_torch, step_numpy, device=device(),
                          compression=kind, compression_block=64)
    assert np.mean(np.abs(got - expected) > 1e-3) < 0.01, np.abs(got - expected).max()


def optimizer_run(comm, where, kind):
    """DistributedOptimizer over compressed syncgrad in three buckets: the
    count known before backward, so the first two leave from backward's
    hooks on psgd's transfer thread. The final flat model."""
    model = cnn(seed=comm.rank).to(where)
    sync = psgd.torch.create("syncgrad", model, comm=comm, bucket_mb=3e-5, compression=kind,
                             compression_block=64)
    assert len(sync.buckets.buckets) == 3
    opt = psgd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), sync)
    for t in range(4):
        opt.zero_grad()
        opt.samples = counts(comm.rank, t)
        backward_toward(model, targets(model, comm.rank, t))
        opt.step()
    opt.stop()
    sync.close()
    return flat(model.parameters())


@pytest.mark.parametrize("kind", ["fp16", "1bit"])
def test_cuda_buckets_compressed_from_backward_match_the_cpu_model(comm, kind):
    got, expected = (optimizer_run(comm, where, kind) for where in (device(), "cpu"))
    assert np.mean(np.abs(got - expected) > 1e-3) < 0.01, np.abs(got - expected).max()


def test_a_model_on_another_gpu_needs_no_set_device(comm):
    """cuda:1 while CuPy's and torch's current device is 0: psgd makes the
    model's GPU current for its own work, and waits for torch's streams."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    second = torch.device("cuda", 1)
    model = cnn(seed=comm.rank).to(second)
    with cupy.cuda.Device(0):
        sync = psgd.torch.create("bsp", model, comm=comm)
        side = torch.cuda.Stream(second)
        with torch.cuda.stream(side):           # the user's work, on a side stream
            for p in model.parameters():
                p.data.fill_(comm.rank + 1.0)
        sync.synchronize(1)
        sync.stop(0)
    mean = sum(range(1, comm.size + 1)) / comm.size
    for p in model.parameters():
        np.testing.assert_allclose(p.detach().cpu().numpy(), mean, rtol=1e-6)
