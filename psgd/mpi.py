"""The MPI layer: a node's place in the job, and buffer-based (never
pickling) exchanges of flat buffers, chunked above a configurable element
count so buffers past MPI's int limit still go through.
"""
import numpy as np
from mpi4py import MPI

from . import cuda_aware as _cuda_aware
from . import mpi_async, settings
from .backend import array_module
from .errors import UsageError
from .protocol import TAG_MODEL

MAIN_RANK = 0


def chunk_elements():
    """The most elements of one MPI call (PSGD_MPI_CHUNK)."""
    return settings.get("PSGD_MPI_CHUNK")


def _chunks(size, step=None):
    most = chunk_elements()
    step = min(step or most, most)
    for start in range(0, size, step):
        yield start, min(start + step, size)
    if size == 0:
        yield 0, 0


def communicator(comm=None):
    """`comm` (COMM_WORLD when None) if it is an intracommunicator psgd can
    use; a UsageError on this rank otherwise, before any collective call
    (which on a bad communicator is MPI's error, or a hang)."""
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise UsageError("comm must be an MPI communicator (mpi4py), got %s"
                         % type(comm).__name__)
    if comm == MPI.COMM_NULL:
        raise UsageError("comm is MPI.COMM_NULL (a freed communicator, or a rank left out "
                         "of a split): pass a communicator this rank belongs to")
    if not isinstance(comm, MPI.Intracomm):
        raise UsageError("comm must be an intracommunicator, got an %s" % type(comm).__name__)
    return comm


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

    def _shared(self):
        """(rank, size) among the processes sharing this node's memory;
        collective on the first call."""
        if self._local is None:
            shared = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
            self._local = (shared.Get_rank(), shared.Get_size())
            shared.Free()
        return self._local

    @property
    def local_rank(self):
        """Rank among the processes sharing this node's memory (picks the GPU)."""
        return self._shared()[0]

    @property
    def local_size(self):
        """Processes sharing this node's memory (more than its GPUs: they share)."""
        return self._shared()[1]

    def allreduce_counts(self, n_k, bad=False):
        """(sum of n_k, ranks with n_k > 0, ranks flagging a bad count) in one
        Allreduce, so a bad count is known to every rank at once."""
        self._counts[:] = (n_k, n_k > 0, bool(bad))
        self.comm.Allreduce(MPI.IN_PLACE, [self._counts, MPI.INT64_T], op=MPI.SUM)
        return int(self._counts[0]), int(self._counts[1]), int(self._counts[2])


class Closeable:
    """Mixin: an object holding communicators it frees in close()
    (collective); `with obj:` closes it when the block ends normally. After
    an error some rank may never reach close(): MPI_Finalize cleans up then."""

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()


_TYPES = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE,
          np.dtype(np.int64): MPI.INT64_T, np.dtype(np.int32): MPI.INT32_T}


def mpi_type(dtype):
    """The predefined MPI datatype of a NumPy dtype (reductions need one)."""
    try:
        return _TYPES[np.dtype(dtype)]
    except KeyError:
        raise TypeError("no MPI datatype for %s" % np.dtype(dtype)) from None


# Chunked, buffer-based calls on host arrays ---------------------------------
def Allreduce(comm, array, op=MPI.SUM):
    """In-place sum over all ranks of a contiguous 1-D host or device array."""
    for lo, hi in _chunks(array.size):
        comm.Allreduce(MPI.IN_PLACE, array[lo:hi], op=op)


def Iallreduce(comm, array, op=MPI.SUM):
    return [comm.Iallreduce(MPI.IN_PLACE, array[lo:hi], op=op) for lo, hi in _chunks(array.size)]


def Bcast(comm, array, root=MAIN_RANK):
    for lo, hi in _chunks(array.size):
        comm.Bcast(array[lo:hi], root=root)


def Send(comm, array, dest, tag=TAG_MODEL, step=None):
    for lo, hi in _chunks(array.size, step):
        comm.Send(array[lo:hi], dest=dest, tag=tag)


def Recv(comm, array, source, tag=TAG_MODEL, step=None):
    for lo, hi in _chunks(array.size, step):
        comm.Recv(array[lo:hi], source=source, tag=tag)


def Sendrecv(comm, send, recv, peer, tag=TAG_MODEL, step=None):
    for lo, hi in _chunks(send.size, step):
        comm.Sendrecv(send[lo:hi], dest=peer, sendtag=tag,
                      recvbuf=recv[lo:hi], source=peer, recvtag=tag)


def Isend(comm, array, dest, tag=TAG_MODEL, step=None):
    return [comm.Isend(array[lo:hi], dest=dest, tag=tag) for lo, hi in _chunks(array.size, step)]


def Irecv(comm, array, source, tag=TAG_MODEL, step=None):
    return [comm.Irecv(array[lo:hi], source=source, tag=tag)
            for lo, hi in _chunks(array.size, step)]


# CUDA-aware MPI: decided once per process (psgd/cuda_aware.py).
cuda_aware = _cuda_aware.cuda_aware


# The stream discipline: the one place where device memory meets MPI ----------
# Kernels and copies run asynchronously on the current stream. Two rules keep
# MPI and the device from racing, and they are kept here and nowhere else:
#   1. Before MPI touches a device buffer (CUDA-aware) or its pinned mirror
#      (staged), all work that writes or reads it has completed: the stream is
#      synchronized before `data` goes to MPI, and a copy to or from the mirror
#      returns only once it is done (FlatBuffer.to_host/from_host wait).
#   2. After a receive, the stage-in (mirror -> device) has completed before
#      the request says it is done, so whoever reads the buffer next reads
#      what arrived.
# Algorithms use Exchange (blocking calls, or isend/irecv and a Request's
# wait()); they never synchronize, stage or chunk by themselves.
def device_ready(array):
    """Rule 1 for an array MPI is about to get: wait for the device's work."""
    if not isinstance(array, np.ndarray):
        array_module(array).cuda.get_current_stream().synchronize()
    return array


class Request:
    """MPI requests of one chunked transfer; wait() completes the transfer
    and then its stage-in (rule 2). `requests` may be waited on alongside
    others (Waitany); wait() afterwards only does what is left."""

    def __init__(self, requests, stage_in=None):
        self.requests = list(requests)
        self._stage_in = stage_in

    def wait(self):
        MPI.Request.Waitall(self.requests)
        stage_in, self._stage_in = self._stage_in, None
        if stage_in is not None:
            stage_in()

    def test(self):
        """Whether the transfer is done (then staged in); MPI progresses it."""
        if not MPI.Request.Testall(self.requests):
            return False
        self.wait()
        return True

    def cancel(self):
        """Withdraw a receive: nothing is staged in."""
        self._stage_in = None
        for request in self.requests:
            if request != MPI.REQUEST_NULL:
                request.Cancel()
        MPI.Request.Waitall(self.requests)


class Exchange:
    """Runs MPI on a FlatBuffer: straight on `data` on the host or with
    CUDA-aware MPI, otherwise staged through the buffer's pinned mirror;
    every call keeps the stream discipline above. `piece`: elements per
    message of send/recv/isend/irecv (None: one message up to MPI's count
    limit); both ends of a transfer must use the same."""

    def __init__(self, comm, buffer, direct=None, piece=None):
        self.comm = comm
        self.buffer = buffer
        if direct is None:
            direct = (not buffer.on_device) or cuda_aware()
        self.direct = direct
        self.piece = piece
        self._spans_hosts = None

    def spans_hosts(self):
        """spans_hosts(comm), asked once (collective on the first call)."""
        if self._spans_hosts is None:
            self._spans_hosts = spans_hosts(self.comm)
        return self._spans_hosts

    def pieces(self):
        """[(lo, hi)] of the messages send/recv/isend/irecv make."""
        return list(_chunks(self.buffer.size, self.piece))

    def _readable(self):
        """The array MPI may read: the model as the device last wrote it."""
        if self.direct:
            return device_ready(self.buffer.data)
        return self.buffer.to_host()

    def _writable(self):
        """The array MPI may write: nothing on the device still uses it."""
        if self.direct:
            return device_ready(self.buffer.data)
        return self.buffer.host

    def _received(self):
        if not self.direct:
            self.buffer.from_host()

    # blocking -------------------------------------------------------------------
    def allreduce(self, before=None, after=None):
        """In-place sum over the ranks, in one call. `before(lo, hi)` /
        `after(lo, hi)`: elementwise work on elements [lo, hi) of
        `buffer.data` to do before the sum reads them / after it wrote them
        (pipeline.allreduce runs them chunk by chunk under the sums)."""
        if before:
            before(0, self.buffer.size)
        Allreduce(self.comm, self._readable())
        self._received()
        if after:
            after(0, self.buffer.size)

    def allreduce_async(self, before=None, after=None, here=False):
        """allreduce(before, after) carried out by psgd's transfer thread
        while the caller goes on (psgd/mpi_async.py); the Handle's wait()
        returns once the sum is in `buffer.data` and `after` has run.
        `here`: in the caller, at once (an Iallreduce all the same: it
        would not match a blocking Allreduce on another rank)."""
        def job():
            if before:
                before(0, self.buffer.size)
            mpi_async.poll(Request(Iallreduce(self.comm, self._readable()), self._received).test)
            if after:
                after(0, self.buffer.size)
        return mpi_async.start(job, self.buffer.device, here)

    def bcast(self, root=MAIN_RANK):
        Bcast(self.comm, self._readable(), root)
        self._received()

    def send(self, dest, tag=TAG_MODEL):
        Send(self.comm, self._readable(), dest, tag, self.piece)

    def recv(self, source, tag=TAG_MODEL):
        Recv(self.comm, self._writable(), source, tag, self.piece)
        self._received()

    def sendrecv(self, peer, received, tag=TAG_MODEL):
        """Send this buffer to `peer` and receive its buffer into `received`
        (another Exchange of the same layout)."""
        Sendrecv(self.comm, self._readable(), received._writable(), peer, tag, self.piece)
        received._received()

    # non-blocking: the buffer is MPI's until the Request's wait() ----------------
    def isend(self, dest, tag=TAG_MODEL):
        return Request(Isend(self.comm, self._readable(), dest, tag, self.piece))

    def irecv(self, source, tag=TAG_MODEL):
        return Request(Irecv(self.comm, self._writable(), source, tag, self.piece),
                       self._received)

    # one piece [lo, hi) of a transfer in pieces, staged alone (pieces.py) ---------
    def isend_part(self, dest, lo, hi, tag=TAG_MODEL):
        if self.direct:
            wire = device_ready(self.buffer.data)
        else:
            self.buffer.to_host(lo, hi)
            wire = self.buffer.host
        return Request([self.comm.Isend(wire[lo:hi], dest=dest, tag=tag)])

    def irecv_part(self, source, lo, hi, tag=TAG_MODEL):
        stage_in = None if self.direct else (lambda: self.buffer.from_host(lo, hi))
        return Request([self.comm.Irecv(self._writable()[lo:hi], source=source, tag=tag)],
                       stage_in)


def spans_hosts(comm):
    """Whether the ranks of `comm` live on more than one host (then some of
    its bytes cross a network). Collective."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        # every host holds fewer than all ranks, or one holds them all: each
        # rank reaches the same answer
        return local.Get_size() < comm.Get_size()
    finally:
        local.Free()


HOST_NAME_BYTES = 256   # MPI_MAX_PROCESSOR_NAME of both libraries


def host_names(comm):
    """Each rank's host name, by rank. Collective."""
    return allgather_text(comm, MPI.Get_processor_name(), HOST_NAME_BYTES)


def allgather_text(comm, text, width):
    """Each rank's `text` (its first `width` UTF-8 bytes), by rank.
    Collective; bytes, not pickles."""
    mine = np.zeros(width, dtype=np.uint8)
    raw = text.encode()[:width]
    mine[:len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    table = np.empty((comm.Get_size(), width), dtype=np.uint8)
    comm.Allgather([mine, MPI.BYTE], [table, MPI.BYTE])
    return [bytes(row).rstrip(b"\0").decode(errors="replace") for row in table]


def describe_ranks(names, ranks):
    """"rank 2 (host h1)", "ranks 2, 3 (host h1)", "ranks 0 (host h0), 3 (host h1)"."""
    ranks = sorted(ranks)
    by_host = {}
    for r in ranks:
        by_host.setdefault(names[r] if r < len(names) else "?", []).append(r)
    words = ", ".join("%s (host %s)" % (", ".join(map(str, rs)), h) for h, rs in by_host.items()) \
        if len(by_host) > 1 else "%s (host %s)" % (", ".join(map(str, ranks)), next(iter(by_host)))
    return ("rank " if len(ranks) == 1 else "ranks ") + words


def describe_hosts(names):
    """"2 hosts: h0 (ranks 0, 1), h1 (ranks 2, 3)" of a rank -> host table."""
    by_host = {}
    for r, h in enumerate(names):
        by_host.setdefault(h, []).append(r)
    return "%d host%s: %s" % (len(by_host), "" if len(by_host) == 1 else "s", ", ".join(
        "%s (rank%s %s)" % (h, "" if len(rs) == 1 else "s", ", ".join(map(str, rs)))
        for h, rs in by_host.items()))


# Shards: an Exchange of elements [lo, hi) of another's buffer ------------------
def exchange_part(exchange, lo, hi, piece=None):
    """An Exchange on elements [lo, hi) of `exchange`'s buffer (a parameter
    server's shard): same communicator and path (direct or through the pinned
    mirror's slice), so the stream discipline above holds unchanged."""
    return Exchange(exchange.comm, exchange.buffer.part(lo, hi), exchange.direct, piece)
