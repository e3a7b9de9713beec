"""cupy.cuda.nccl of the simulated device: a communicator whose reductions
MPI carries out on the host memory behind the device pointers.

A call is queued on the stream it names, like NCCL's: it first runs what
that stream holds before it (the data NCCL would read), then sums over MPI
at once, so work queued on another stream and not waited for is missing
from the sum, as on a GPU. The communicator belongs to the device current
at its creation; a call while another device is current, or on a stream of
another device, is an error. Its MPI communicator is a split of COMM_WORLD
by the unique id: every rank of COMM_WORLD creates one at the same time
(the tests do).
"""
import ctypes
import zlib

import numpy as np
from mpi4py import MPI

from . import device

NCCL_SUM = 0
NCCL_FLOAT32 = 7
NCCL_FLOAT64 = 8
_TYPES = {NCCL_FLOAT32: np.float32, NCCL_FLOAT64: np.float64}
available = True


def get_version():
    return 21805


def get_unique_id():
    """128 bytes, as CuPy 14 gives them (older CuPy: a tuple of 128 ints)."""
    return np.random.default_rng().integers(-128, 128, 128).astype(np.int8).tobytes()


def _array(pointer, count, datatype):
    """The host memory behind a simulated device pointer."""
    dtype = np.dtype(_TYPES[datatype])
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(pointer)
    return np.frombuffer(raw, dtype=dtype)


class NcclError(RuntimeError):
    pass


class NcclCommunicator:
    def __init__(self, ndev, commId, rank):
        if not isinstance(commId, bytes) or len(commId) != 128:
            raise ValueError("simcupy nccl: a unique id is 128 bytes, got %r" % (commId,))
        self.device = device.current_device()
        self.rank, self.ndev = rank, ndev
        color = zlib.crc32(commId) & 0x7FFFFFFF
        self.comm = MPI.COMM_WORLD.Split(color, key=rank)
        if self.comm.Get_size() != ndev or self.comm.Get_rank() != rank:
            raise RuntimeError("simcupy nccl: ranks disagree on the communicator (ndev %d, "
                               "rank %d; %d joined)" % (ndev, rank, self.comm.Get_size()))
        gpus = self.comm.allgather((MPI.Get_processor_name(), device.pci_bus_id(self.device)))
        if len(set(gpus)) < len(gpus):          # NCCL's own check, on every rank
            self.comm.Free()
            raise NcclError("ncclInvalidUsage: Duplicate GPU detected")
        self.calls = 0

    def device_id(self):
        return self.device

    def _queue(self, stream_ptr, op):
        device.check_device(self.device, "the NCCL communicator")
        here = device._state.here()
        streams = [s for s in here.streams if s.ptr == stream_ptr]
        if stream_ptr == 0:
            streams = [here.null]
        if not streams:
            raise ValueError("simcupy nccl: stream %#x is not a stream of device %d"
                             % (stream_ptr, self.device))
        stream = streams[0]
        stream.synchronize()             # what NCCL reads: the stream's work before it
        self.calls += 1
        op()

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        if op != NCCL_SUM:
            raise NotImplementedError("simcupy nccl: only NCCL_SUM")

        def run():
            send, recv = _array(sendbuf, count, datatype), _array(recvbuf, count, datatype)
            self.comm.Allreduce(MPI.IN_PLACE if sendbuf == recvbuf else send, recv, op=MPI.SUM)
        self._queue(stream, run)

    def bcast(self, buff, count, datatype, root, stream):
        self._queue(stream, lambda: self.comm.Bcast(_array(buff, count, datatype), root=root))

    def destroy(self):
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
