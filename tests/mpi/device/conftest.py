"""The device suite: the same MPI tests on the simulated device (tests/simcupy,
always) and on real CuPy (the GPU twins, skipped without a device), each
with MPI staged through pinned memory and handed device memory directly."""
import numpy as np
import pytest
from mpi4py import MPI

from device_util import real_cupy
from psgd import cuda_aware, nccl

DEVICES = ["sim-staged", "sim-direct", "cupy-staged", "cupy-direct"]


def _skip_everywhere(reason):
    """Skip on every rank or on none (a skip on one rank only would hang)."""
    flag = np.array([1 if reason else 0], dtype=np.int64)
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, [flag, MPI.INT64_T], op=MPI.MAX)
    if flag[0]:
        pytest.skip(reason or "skipped on another rank")


@pytest.fixture(params=DEVICES)
def xp(request):
    kind, path = request.param.split("-")
    previous = None
    if kind == "sim":
        import simcupy
        previous, module = simcupy.install(), simcupy
        simcupy.set_mpi(cuda_aware=path == "direct")     # staged: a host-only MPI
        _skip_everywhere(None)
    else:
        module, count = real_cupy()
        reason = None if count else "no CUDA device (GPU twin)"
        if count and path == "direct" and not cuda_aware.detect()[0]:
            reason = "MPI is not CUDA-aware here"
        _skip_everywhere(reason)
        module.cuda.Device(MPI.COMM_WORLD.Get_rank() % count).use()   # ranks share GPUs
    cuda_aware.configure("yes" if path == "direct" else "no")
    nccl.configure("mpi")            # these test the MPI paths, even where NCCL loads
    try:
        yield module
    finally:
        module.cuda.Device().synchronize()
        cuda_aware.configure()
        nccl.configure()
        if kind == "sim":
            import simcupy
            simcupy.uninstall(previous)
