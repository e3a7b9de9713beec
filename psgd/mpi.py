"""The MPI layer: a node's place in the job, the wire constants, and
buffer-based (never pickling) exchanges of flat buffers, chunked above a
configurable element count so buffers past MPI's int limit still go through.
"""
import ctypes
import hashlib
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

from .errors import CollectiveError, UsageError

# Wire protocol of the server algorithms (ALGORITHMS.md).
TAG_MSG = 0
TAG_MODEL = 1
MSG_SYNC = 0
MSG_FINISHED = 1
MESSAGES = {MSG_SYNC: "SYNC", MSG_FINISHED: "FINISHED"}
MAIN_RANK = 0

# MPI counts are C ints; stay below 2**31 elements per call. Tests shrink it.
DEFAULT_CHUNK = 2 ** 30
_chunk = int(os.environ.get("PSGD_MPI_CHUNK", DEFAULT_CHUNK))


def set_chunk_elements(n):
    """Largest element count of one MPI call; returns the previous value."""
    global _chunk
    if int(n) < 1:
        raise ValueError("chunk size must be >= 1, got %r" % (n,))
    old, _chunk = _chunk, int(n)
    return old


def chunk_elements():
    return _chunk


def _chunks(size):
    step = _chunk
    for start in range(0, size, step):
        yield start, min(start + step, size)
    if size == 0:
        yield 0, 0


class Node:
    """This rank's place in a communicator: rank, size, main node, local rank."""

    def __init__(self, comm=None):
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._local = None
        self._counts = np.zeros(3, dtype=np.int64)

    @property
    def is_main(self):
        return self.rank == MAIN_RANK

    @property
    def local_rank(self):
        """Rank among the processes sharing this node's memory (picks the GPU)."""
        if self._local is None:
            shared = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
            self._local = (shared.Get_rank(), shared.Get_size())
            shared.Free()
        return self._local[0]

    def allreduce_counts(self, n_k, bad=False):
        """(sum of n_k, ranks with n_k > 0, ranks flagging a bad count) in one
        Allreduce, so a bad count is known to every rank at once."""
        self._counts[:] = (n_k, n_k > 0, bool(bad))
        self.comm.Allreduce(MPI.IN_PLACE, [self._counts, MPI.INT64_T], op=MPI.SUM)
        return int(self._counts[0]), int(self._counts[1]), int(self._counts[2])

    def allreduce_scalar(self, value, op=MPI.SUM, dtype=np.float64):
        buf = np.array([value], dtype=dtype)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=op)
        return buf[0].item()


# Chunked, buffer-based calls on host arrays ---------------------------------
def Allreduce(comm, array, op=MPI.SUM):
    """In-place sum over all ranks of a contiguous 1-D host or device array."""
    for lo, hi in _chunks(array.size):
        comm.Allreduce(MPI.IN_PLACE, array[lo:hi], op=op)


def Bcast(comm, array, root=MAIN_RANK):
    for lo, hi in _chunks(array.size):
        comm.Bcast(array[lo:hi], root=root)


def Send(comm, array, dest, tag=TAG_MODEL):
    for lo, hi in _chunks(array.size):
        comm.Send(array[lo:hi], dest=dest, tag=tag)


def Recv(comm, array, source, tag=TAG_MODEL):
    for lo, hi in _chunks(array.size):
        comm.Recv(array[lo:hi], source=source, tag=tag)


def Sendrecv(comm, send, recv, peer, tag=TAG_MODEL):
    for lo, hi in _chunks(send.size):
        comm.Sendrecv(send[lo:hi], dest=peer, sendtag=tag,
                      recvbuf=recv[lo:hi], source=peer, recvtag=tag)


# CUDA-aware MPI ---------------------------------------------------------------
_ENV_HINTS = (("OMPI_MCA_opal_cuda_support", "true"), ("MV2_USE_CUDA", "1"),
              ("MPICH_GPU_SUPPORT_ENABLED", "1"))


def cuda_aware():
    """Whether MPI may be handed device pointers. PSGD_CUDA_AWARE=0|1 forces
    it; otherwise ask the library (MPIX_Query_cuda_support) or its env hints."""
    forced = os.environ.get("PSGD_CUDA_AWARE")
    if forced is not None and forced != "":
        return forced.lower() in ("1", "true", "yes", "on")
    try:
        query = ctypes.CDLL(None).MPIX_Query_cuda_support
        return bool(query())
    except (AttributeError, OSError):
        pass
    return any(os.environ.get(k, "").lower() == v for k, v in _ENV_HINTS)


class Exchange:
    """Runs MPI on a FlatBuffer: straight on `data` on the host or with
    CUDA-aware MPI, otherwise staged through the buffer's pinned mirror."""

    def __init__(self, comm, buffer, direct=None):
        self.comm = comm
        self.buffer = buffer
        if direct is None:
            direct = (not buffer.on_device) or cuda_aware()
        self.direct = direct

    def _stage_out(self):
        if self.direct:
            if self.buffer.on_device:
                self.buffer.xp.cuda.get_current_stream().synchronize()
            return self.buffer.data
        return self.buffer.to_host()

    def _stage_in(self):
        if not self.direct:
            self.buffer.from_host()

    def allreduce(self):
        Allreduce(self.comm, self._stage_out())
        self._stage_in()

    def bcast(self, root=MAIN_RANK):
        Bcast(self.comm, self._stage_out(), root)
        self._stage_in()

    def send(self, dest, tag=TAG_MODEL):
        Send(self.comm, self._stage_out(), dest, tag)

    def recv(self, source, tag=TAG_MODEL):
        array = self.buffer.data if self.direct else self.buffer.host
        Recv(self.comm, array, source, tag)
        self._stage_in()

    def sendrecv(self, peer, received, tag=TAG_MODEL):
        """Send this buffer to `peer` and receive its buffer into `received`
        (another Exchange of the same layout)."""
        Sendrecv(self.comm, self._stage_out(), received._landing(), peer, tag)
        received._stage_in()

    def _landing(self):
        return self.buffer.data if self.direct else self.buffer.host


# Agreement: errors and layouts -------------------------------------------------
def _bcast_text(comm, text, root):
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8) if comm.rank == root else None
    length = np.array([0 if raw is None else raw.size], dtype=np.int64)
    comm.Bcast([length, MPI.INT64_T], root=root)
    buf = raw.copy() if raw is not None else np.empty(int(length[0]), dtype=np.uint8)
    comm.Bcast([buf, MPI.BYTE], root=root)
    return buf.tobytes().decode("utf-8")


def agree(comm, error):
    """Collective: if any rank has an `error`, every rank raises. The text is
    the lowest failing rank's (named unless every rank failed), so all ranks
    report the same line; the failing rank re-raises its own exception."""
    flags = np.array([comm.size if error is None else comm.rank, error is not None],
                     dtype=np.int64)
    first = np.empty(1, dtype=np.int64)
    failed = np.empty(1, dtype=np.int64)
    comm.Allreduce([flags[:1], MPI.INT64_T], [first, MPI.INT64_T], op=MPI.MIN)
    comm.Allreduce([flags[1:], MPI.INT64_T], [failed, MPI.INT64_T], op=MPI.SUM)
    first, failed = int(first[0]), int(failed[0])
    if first == comm.size:
        return
    usage = isinstance(error, UsageError)
    text = _bcast_text(comm, ("U" if usage else "E") + str(error) if comm.rank == first else "",
                       first)
    kind, text = (UsageError if text[0] == "U" else CollectiveError), text[1:]
    if failed < comm.size:
        text = "rank %d: %s" % (first, text)
    if comm.rank == first and not usage:
        error.collective = True
        raise error
    exc = kind(text)
    exc.collective = True  # every rank raises it: no rank is left waiting
    raise exc


def check_same(comm, description, what="layout"):
    """Collective: raise UsageError on every rank unless `description` (a
    JSON-able dict) is identical on all ranks; the message names the ranks and
    the first difference. Only hashes and UTF-8 JSON cross the wire."""
    text = json.dumps(description, sort_keys=False)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], dtype=np.int64).copy()
    digests = np.empty(comm.size, dtype=np.int64)
    comm.Allgather([digest, MPI.INT64_T], [digests, MPI.INT64_T])
    odd = [r for r in range(comm.size) if digests[r] != digests[0]]
    if not odd:
        return
    other = odd[0]
    mine = _bcast_text(comm, text, 0)
    theirs = _bcast_text(comm, text, other)
    diff = first_difference(json.loads(mine), json.loads(theirs))
    exc = UsageError("%s differs between rank 0 and rank%s %s: %s" % (
        what, "s" if len(odd) > 1 else "", ",".join(map(str, odd)), diff))
    exc.collective = True
    raise exc


def first_difference(a, b, path=""):
    """A short text naming where two JSON values first differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return "%s%s present on one side only" % (path, key)
            d = first_difference(a[key], b[key], "%s%s." % (path, key))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "%s has %d entries vs %d" % (path.rstrip(".") or "value", len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s%d." % (path, i))
            if d:
                return d
        return None
    if a != b:
        return "%s %r vs %r" % (path.rstrip(".") or "value", a, b)
    return None


# Abort on error ----------------------------------------------------------------
ABORT_GRACE = 1.0  # seconds


def abort_on_error(comm=None):
    """Make an uncaught exception on any rank print one line naming the rank
    and end the whole job (MPI_Abort) instead of hanging the other ranks."""
    comm = comm if comm is not None else MPI.COMM_WORLD
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
        elif issubclass(kind, (UsageError, CollectiveError)):
            sys.stderr.write("psgd: error: %s\n" % value)
            if issubclass(kind, CollectiveError):
                # Raised on every rank (a server's notice says "it failed"):
                # give the rank that knows why the moment to say it before
                # this rank's MPI_Abort takes the job down.
                sys.stderr.flush()
                time.sleep(ABORT_GRACE)
        else:
            if os.environ.get("PSGD_TRACEBACK"):
                previous(kind, value, tb)
            sys.stderr.write("psgd: rank %d failed: %s: %s\n" % (comm.rank, kind.__name__, value))
        sys.stderr.flush()
        comm.Abort(1)

    sys.excepthook = hook
    return hook
