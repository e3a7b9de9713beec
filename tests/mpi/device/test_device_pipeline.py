"""The pipelined allreduce with the model on a device: the replays hold at
small chunks, staged or direct, and no device memory ever reaches a
non-blocking reduction (Open MPI's CUDA support, UCX included, does not
cover MPI_Iallreduce on device buffers)."""
import numpy as np
import pytest
from mpi4py import MPI

from device_util import load

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

pipelines = load("algorithms/test_pipeline.py")
collective = load("algorithms/test_collective.py")


class HostOnlyIallreduce(MPI.Intracomm):
    """A communicator whose non-blocking reductions take host memory only,
    as a CUDA-aware Open MPI's do."""

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        for buf in (sendbuf, recvbuf):
            if buf is not MPI.IN_PLACE and not isinstance(buf, np.ndarray):
                raise AssertionError("device memory handed to MPI_Iallreduce (%s)"
                                     % type(buf).__name__)
        return super().Iallreduce(sendbuf, recvbuf, op)


@pytest.mark.parametrize("name", ["bsp", "bmuf", "sod"])
def test_pipelined_replay_on_device_keeps_device_memory_out_of_iallreduce(comm, xp, name):
    update, final_of, options = pipelines.REPLAYS[name]
    guarded = HostOnlyIallreduce(comm)
    with pipelines.Pipelined(4):
        sync = collective.check(guarded, name, update, final_of, xp=xp, **options)
    assert sync.buffer.on_device
