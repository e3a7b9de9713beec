import numpy as np
import pytest

from psgd import backend, cuda_aware, mpi
from psgd.errors import UsageError


def test_the_environment_picks_the_backend_when_no_name_is_given(monkeypatch, setting):
    monkeypatch.setattr(backend, "_cupy_with_devices", lambda: None)   # no GPU here
    setting("PSGD_BACKEND", "cupy")
    with pytest.raises(UsageError, match="CuPy or a CUDA device is not available"):
        backend.get_backend()                      # the environment was read
    b = backend.get_backend("numpy")               # a name given wins over it
    assert b.xp is np and not b.is_gpu and b.name == "numpy"
    setting("PSGD_BACKEND", "tpu")
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        backend.get_backend()


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ValueError, match="auto, numpy, cupy"):
        backend.get_backend("tpu")


def test_auto_falls_back_to_numpy_and_cupy_without_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(backend, "_cupy_with_devices", lambda: None)
    assert backend.get_backend("auto").xp is np
    with pytest.raises(UsageError, match="CuPy or a CUDA device is not available"):
        backend.get_backend("cupy")


def test_device_id_lists():
    assert backend.parse_device_ids("0,2, 3") == [0, 2, 3]
    assert backend.parse_device_ids(None) is None and backend.parse_device_ids("") is None
    with pytest.raises(ValueError, match="comma-separated"):
        backend.parse_device_ids("0,x")


def test_cuda_aware_can_be_forced(setting):
    setting("PSGD_CUDA_AWARE", "1")
    assert cuda_aware.configure() == (True, "forced by PSGD_CUDA_AWARE=1")
    assert mpi.cuda_aware()
    setting("PSGD_CUDA_AWARE", "no")
    assert not cuda_aware.configure()[0] and not mpi.cuda_aware()
    assert cuda_aware.configure("yes") == (True, "forced by --cuda-aware yes")  # the flag wins
    assert "directly" in cuda_aware.describe()
    with pytest.raises(UsageError, match="PSGD_CUDA_AWARE must be auto, yes or no"):
        setting("PSGD_CUDA_AWARE", "maybe") or cuda_aware.configure()
    setting("PSGD_CUDA_AWARE", None)
    cuda_aware.configure()


def test_cuda_aware_auto_asks_the_loaded_libmpi(monkeypatch, setting):
    """MPICH is loaded RTLD_LOCAL: the query must be found through the
    library's own handle, not the global namespace."""
    setting("PSGD_CUDA_AWARE", None)
    path, lib = cuda_aware.libmpi()
    assert path and hasattr(lib, "MPI_Init")
    family = cuda_aware.library_family()
    assert family in ("MPICH", "Open MPI")
    aware, reason = cuda_aware.configure("auto")
    assert not aware          # no GPU here: neither wheel is built with CUDA
    assert reason.startswith("MPIX_Query_cuda_support() = 0 in %s" % family), reason
    hint = "MPIR_CVAR_ENABLE_GPU" if family == "MPICH" else "OMPI_MCA_opal_cuda_support"
    monkeypatch.setenv(hint, "1" if family == "MPICH" else "true")
    aware, reason = cuda_aware.configure("auto")
    assert not aware and hint in reason       # the library's 0 wins, and the log says so
    monkeypatch.delenv(hint)
    assert "staged through pinned host memory (MPI is not CUDA-aware: " in cuda_aware.describe()


def test_device_buffers_are_staged_unless_mpi_is_cuda_aware(setting):
    from types import SimpleNamespace

    from psgd.buffers import FlatBuffer
    host = FlatBuffer.pack([np.ones(3, np.float32)])
    device = SimpleNamespace(on_device=True)       # all Exchange asks of a device buffer here
    from psgd import cuda_aware
    setting("PSGD_CUDA_AWARE", "0")
    cuda_aware.configure()                         # decided once per process: decide again
    assert mpi.Exchange(None, host).direct         # host memory goes to MPI as it is
    assert not mpi.Exchange(None, device).direct   # device memory via the pinned mirror
    setting("PSGD_CUDA_AWARE", "1")
    cuda_aware.configure()
    assert mpi.Exchange(None, device).direct
    setting("PSGD_CUDA_AWARE", None)
    cuda_aware.configure()


def test_a_cupy_that_cannot_compile_kernels_is_not_a_gpu_backend(sim):
    """cupy-cuda12x without [ctk] on a host with only the driver: the device
    count says yes, the first kernel says no. auto runs on the host and
    says why; cupy is a one-line error naming the fix."""
    sim.install(toolkit=False)
    with pytest.warns(UserWarning, match=r"running on the host: CuPy cannot compile kernels"):
        assert backend.get_backend("auto") is backend.NUMPY
    with pytest.raises(UsageError, match=r"--backend cupy: CuPy cannot compile kernels "
                                         r"\(CompileException: .*cupy-cuda12x\[ctk\]"):
        backend.get_backend("cupy")
    sim.install()
    assert backend.get_backend("auto").xp is sim


def test_more_ranks_than_gpus_on_a_host_says_so(sim, recwarn):
    b = backend.get_backend("cupy", local_rank=2, local_size=3)     # two simulated GPUs
    assert b.device_id == 0 and sim.cuda.Device().id == 0
    assert "3 ranks on this host share 2 GPUs" in str(recwarn.pop(UserWarning).message)
    backend.get_backend("cupy", local_rank=1, local_size=2)
    backend.get_backend("cupy", local_rank=2, local_size=3, device_ids="0")   # meant
    assert not recwarn.list
