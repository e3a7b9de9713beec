"""Buffer-based MPI collectives on xp (NumPy or CuPy) arrays for the layers
of the hybrid network, with explicit datatypes (never pickling) and the
bytes of every call added to a Traffic counter.

Device arrays go to MPI directly when the MPI library is CUDA-aware
(psgd.mpi.cuda_aware) and are staged through page-locked scratch kept
across calls otherwise; either way under the stream discipline of
psgd/mpi.py (mpi.device_ready).
"""
import numpy as np
from mpi4py import MPI

from ... import mpi
from ...mpi import mpi_type
from ...backend import array_module, empty_pinned, to_numpy
from . import traffic as tr



def _set(device_array, host):
    """host -> device_array, complete when it returns (the host array is
    scratch the next call writes)."""
    stream = array_module(device_array).cuda.get_current_stream()
    device_array.set(host, stream=stream)
    stream.synchronize()


class Collectives:
    """The communicator of a hybrid network and its byte counter."""

    def __init__(self, comm, traffic=None):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.traffic = traffic if traffic is not None else tr.Traffic()
        self._cuda_aware = None
        self._staging = {}

    @property
    def _direct(self):
        if self._cuda_aware is None:
            self._cuda_aware = mpi.cuda_aware()
        return self._cuda_aware

    # staging ---------------------------------------------------------------------------
    # Staged, a call goes through two page-locked scratch arrays kept across
    # calls (send and receive, grown to the largest call): no host array per
    # call, and no device temporary for the in-place sum.
    def _scratch(self, role, dtype, shape):
        size = int(np.prod(shape))
        key = (role, np.dtype(dtype))
        held = self._staging.get(key)
        if held is None or held.size < size:
            held = self._staging[key] = empty_pinned((max(size, 1),), dtype)
        return held[:size].reshape(shape)

    def _host(self, a):
        """The array MPI reads: `a` itself on the host (or CUDA-aware MPI), or
        its copy in the send scratch, complete (rule 1 of psgd/mpi.py)."""
        if isinstance(a, np.ndarray):
            return np.ascontiguousarray(a)
        if self._direct:
            return mpi.device_ready(a if a.flags.c_contiguous else a.copy())
        staged = self._scratch("send", a.dtype, a.shape)
        stream = array_module(a).cuda.get_current_stream()
        a.get(stream=stream, out=staged)
        stream.synchronize()
        return staged

    def _empty(self, like, shape):
        """An output buffer MPI can write: host unless MPI takes device memory."""
        if isinstance(like, np.ndarray):
            return np.empty(shape, dtype=like.dtype)
        if not self._direct:
            return self._scratch("recv", like.dtype, shape)
        return array_module(like).empty(shape, dtype=like.dtype)

    @staticmethod
    def _back(xp, out):
        """`out` as an array of xp: a new device array from the receive
        scratch, copied before the scratch is used again."""
        if xp is np or not isinstance(out, np.ndarray):
            return out
        result = xp.empty(out.shape, dtype=out.dtype)
        _set(result, out)
        return result

    # collectives -----------------------------------------------------------------------
    def allgather(self, x, kind, xp=np):
        """(N,) + x.shape: every rank's `x` in rank order."""
        send = self._host(x)
        recv = self._empty(send, (self.size,) + tuple(x.shape))
        t = mpi_type(send.dtype)
        self.comm.Allgather([send, t], [recv, t])
        self.traffic.add(kind, tr.allgather_bytes(send.nbytes, self.size))
        return self._back(xp, recv)

    def reduce_scatter(self, x, kind, xp=np):
        """x is (N, *piece): the sum over ranks of x[rank], a `piece`."""
        send = self._host(x)
        recv = self._empty(send, tuple(x.shape[1:]))
        t = mpi_type(send.dtype)
        self.comm.Reduce_scatter_block([send, t], [recv, t], op=MPI.SUM)
        self.traffic.add(kind, tr.reduce_scatter_bytes(recv.nbytes, self.size))
        return self._back(xp, recv)

    def allreduce(self, x, kind, op=MPI.SUM, xp=np):
        """A new array: `x` reduced over the ranks with `op`."""
        send = self._host(x)
        recv = self._empty(send, send.shape)
        t = mpi_type(send.dtype)
        self.comm.Allreduce([send, t], [recv, t], op=op)
        self.traffic.add(kind, tr.allreduce_bytes(send.nbytes, self.size))
        return self._back(xp, recv)

    def allreduce_inplace(self, x, kind):
        """Sum a contiguous 1-D array over the ranks in place (the gradient
        range of the flat buffer: no copy on the host), in MPI-sized chunks."""
        if x.size == 0:
            return
        buf = self._host(x)
        t, step = mpi_type(buf.dtype), mpi.chunk_elements()
        for lo in range(0, buf.size, step):
            self.comm.Allreduce(MPI.IN_PLACE, [buf[lo:lo + step], t], op=MPI.SUM)
        if isinstance(buf, np.ndarray) and not isinstance(x, np.ndarray):
            if x.flags.c_contiguous:       # staged: straight back into x
                _set(x, buf)
            else:
                x[...] = array_module(x).asarray(buf)
        elif buf is not x:                 # a contiguous copy: back into x, in stream order
            x[...] = buf
        self.traffic.add(kind, tr.allreduce_bytes(x.nbytes, self.size))

    def gather(self, x, root=0):
        """(N,) + x.shape on `root` (host array), None elsewhere; not counted."""
        send = np.ascontiguousarray(to_numpy(x))
        t = mpi_type(send.dtype)
        recv = np.empty((self.size,) + send.shape, send.dtype) if self.rank == root else None
        self.comm.Gather([send, t], [recv, t] if recv is not None else None, root=root)
        return recv

    def bcast(self, x, root=0):
        """Broadcast a host array in place from `root`; not counted."""
        t, step = mpi_type(x.dtype), mpi.chunk_elements()
        flat = x.reshape(-1)
        for lo in range(0, flat.size, step):
            self.comm.Bcast([flat[lo:lo + step], t], root=root)
        return x
