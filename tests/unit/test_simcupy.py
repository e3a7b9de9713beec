"""The simulated device is hard to fool: what a real GPU would punish, it
rejects (a device pointer given to a host-only MPI, an array used while
another device is current, a kernel without the CUDA headers)."""
import numpy as np
import pytest
from mpi4py import MPI

import simcupy
from simcupy import device


def test_a_host_only_mpi_rejects_device_memory(sim):
    a = sim.asarray(np.ones(4, np.float32))
    with pytest.raises(BufferError, match="not CUDA-aware"):
        MPI.COMM_SELF.Allreduce(MPI.IN_PLACE, a)        # DLPack: mpi4py's first try
    with pytest.raises(BufferError, match="not CUDA-aware"):
        a.__cuda_array_interface__
    b = sim.asarray(np.ones(2)) * 3                     # queued
    np.testing.assert_array_equal(np.from_dlpack(_Consumer(b)), 3.0)   # torch's way: in order
    sim.set_mpi(cuda_aware=True)
    sim.cuda.get_current_stream().synchronize()
    MPI.COMM_SELF.Allreduce(MPI.IN_PLACE, a)            # through DLPack, as mpi4py does
    np.testing.assert_array_equal(a.get(), 1.0)
    assert a.__dlpack_device__() == (2, 0)


class _Consumer:
    """A DLPack consumer that names its stream (as torch.from_dlpack does),
    shown to NumPy as a host producer to read the result."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, **kwargs):
        return self.array.__dlpack__(stream=1)


def test_an_array_of_another_device_is_an_error(sim):
    assert sim.cuda.runtime.getDeviceCount() == 2
    with sim.cuda.Device(1):
        b = sim.zeros(3)
        stream1 = sim.cuda.Stream()
        assert b.device.id == 1 and sim.cuda.Device().id == 1
    a = sim.zeros(3)
    assert a.device.id == 0
    with pytest.raises(ValueError, match="Peer access is unavailable"):
        a + b
    with pytest.raises(ValueError, match="Peer access is unavailable"):
        b *= 2
    with pytest.raises(ValueError, match="device"):
        with stream1:
            pass
    with sim.cuda.Device(1):
        b *= 2                                           # on its own device: fine
        with stream1:
            b += 1
        assert not stream1.done
    np.testing.assert_array_equal(b.get(), 0.0)         # get: the array's device's stream
    stream1.synchronize()
    np.testing.assert_array_equal(b.get(), 1.0)


def test_each_device_has_its_own_streams(sim):
    s0 = sim.cuda.get_current_stream()
    with sim.cuda.Device(1):
        s1 = sim.cuda.get_current_stream()
        assert s1 is not s0 and s1 is sim.cuda.Stream.null
    assert sim.cuda.get_current_stream() is s0


def test_kernels_need_the_cuda_headers(sim):
    simcupy.install(toolkit=False)
    kernel = sim.ElementwiseKernel("T x", "T y", "y = (T)2 * x", "twice")
    with pytest.raises(sim.cuda.compiler.CompileException, match="cuda_fp16.h"):
        kernel(sim.ones(2), sim.zeros(2))
    simcupy.install()
    y = kernel(sim.ones(2, np.float32), sim.zeros(2, np.float32))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.get(), 2.0)
