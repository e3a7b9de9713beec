"""The NCCL exchange of the collective algorithms on GPUs: the same
allreduce(before, after) and bcast(root) as psgd.mpi.Exchange, carried out
by NCCL (cupy.cuda.nccl) on the device, with no host round trip.

NCCL's calls are queued on the current stream like kernels, so the stream
discipline of psgd/mpi.py holds by stream order alone: the kernels queued
before a sum are done before NCCL reads the buffer (rule 1) and the kernels
queued after it read what it wrote (rule 2), with no synchronization on the
host. One communicator per algorithm object: rank 0 makes the unique id,
MPI broadcasts it once (as integers, no pickle), and every rank joins with
the current device.

Which exchange (`--exchange auto|mpi|nccl`, PSGD_EXCHANGE, or
psgd.create's exchange=): auto takes NCCL when the algorithm is a
collective one and every rank's model is on a GPU where NCCL loads; nccl
insists (a one-line error on every rank naming the ranks without it);
mpi never takes it. The server algorithms stay on MPI (point-to-point).
"""

import importlib

import numpy as np
from mpi4py import MPI

from . import agreement, mpi, settings
from .backend import cupy_module
from .errors import UsageError

SETTINGS = ("auto", "mpi", "nccl")
ENV = "PSGD_EXCHANGE"
BUS_ID_BYTES = 64      # a PCI bus id, "0000:19:00.0", with room to spare
_state = {"setting": None, "chosen": None}    # chosen: the last decision's log line


def parse(text, what="--exchange"):
    word = str(text).strip().lower()
    if word not in SETTINGS:
        raise UsageError("%s must be auto, mpi or nccl, got %r" % (what, text))
    return word


def configure(setting=None):
    """The process's setting: `setting` (the flag) wins over PSGD_EXCHANGE,
    which wins over auto."""
    if setting is None:
        env = settings.get(ENV)
        setting = parse(env, ENV) if env else "auto"
    _state["setting"] = parse(setting)
    return _state["setting"]


def setting():
    return _state["setting"] if _state["setting"] is not None else configure()


def describe():
    """The start-up log line when NCCL carries the sums, or None."""
    return _state["chosen"]


def nccl_module():
    """(cupy.cuda.nccl, None), or (None, why it is not usable here)."""
    try:
        cupy = cupy_module()
        # A submodule CuPy does not import by itself: cupy.cuda.nccl is
        # missing until imported (seen with CuPy 14 on an H200).
        nccl = getattr(cupy.cuda, "nccl", None) or \
            importlib.import_module(cupy.__name__ + ".cuda.nccl")
        if getattr(nccl, "available", True) is False:
            return None, "CuPy was built without NCCL"
        return nccl, None
    except Exception as exc:   # ImportError (no libnccl), no CuPy: "no NCCL here"
        return None, "NCCL does not load (%s)" % (" ".join(str(exc).split())[:120] or
                                                  type(exc).__name__)


def choose(comm, buffer, kind, algorithm, server_based):
    """The NCCL communicator the exchanges of this rank use, or None (MPI).
    Collective over `comm`: every rank reaches the same answer, or the same
    UsageError."""
    if kind == "mpi" or (kind == "auto" and server_based):
        _state["chosen"] = None
        return None
    if server_based:
        raise UsageError("exchange nccl: %s is a server algorithm, whose exchanges stay on "
                         "MPI; NCCL serves bsp, bmuf, sod and syncgrad" % algorithm)
    nccl = nccl_module()[0] if buffer.on_device else None
    code = np.array([0 if nccl is not None else 1 if buffer.on_device else 2], dtype=np.int64)
    codes = np.empty(comm.Get_size(), dtype=np.int64)
    comm.Allgather([code, MPI.INT64_T], [codes, MPI.INT64_T])
    if codes.any():
        _state["chosen"] = None
        if kind == "nccl":
            names = mpi.host_names(comm)
            raise UsageError("exchange nccl: NCCL cannot serve this job: " + "; ".join(
                "%s %s" % (mpi.describe_ranks(names, [r for r, c in enumerate(codes) if c == k]),
                           why) for k, why in ((1, "cannot load NCCL"),
                                               (2, "keep the model on the host"))
                if (codes == k).any()))
        return None
    names = mpi.host_names(comm)
    shared = ranks_sharing_a_gpu(comm, names)
    if shared:
        _state["chosen"] = None
        if kind == "nccl":
            raise UsageError("exchange nccl: NCCL needs a GPU of its own for each rank, and "
                             "%s share one (--gpu-ids; or --exchange auto, which sums "
                             "through MPI then)" % mpi.describe_ranks(names, shared))
        return None
    communicator, why = join(comm, nccl)
    if communicator is None:
        _state["chosen"] = None
        if kind == "nccl":
            raise UsageError("exchange nccl: rank 0 could not make an NCCL unique id "
                             "(ncclGetUniqueId failed: %s)" % why)
        return None
    _state["chosen"] = "exchange: NCCL %s sums the collective algorithms' buffers on the " \
                       "device (%s)" % (_version(nccl), "forced by --exchange nccl"
                                        if kind == "nccl" else "every rank has a GPU and NCCL")
    return communicator


def ranks_sharing_a_gpu(comm, names):
    """The ranks whose current GPU another rank of the same host uses too
    (`names`: mpi.host_names): NCCL refuses such a communicator ("Duplicate
    GPU detected", on every rank), and more ranks than GPUs is a set-up
    psgd allows. Collective."""
    buses = mpi.allgather_text(comm, str(cupy_module().cuda.Device().pci_bus_id), BUS_ID_BYTES)
    gpus = list(zip(names, buses))
    return [r for r, gpu in enumerate(gpus) if gpus.count(gpu) > 1]


def _version(nccl):
    try:
        v = int(nccl.get_version())
        return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
    except Exception:
        return "(version unknown)"


def join(comm, nccl):
    """(one NCCL communicator over the ranks of `comm` on the current
    device, None) or, on every rank, (None, why) when rank 0 cannot make the
    unique id (the others would otherwise wait in NCCL's set-up for ever).
    Rank 0 broadcasts its id, or its reason, behind a one-byte tag."""
    said = None
    if comm.Get_rank() == mpi.MAIN_RANK:
        try:
            made = nccl.get_unique_id()     # bytes from CuPy 14, a tuple of ints before
            said = b"B" + bytes(made) if isinstance(made, (bytes, bytearray)) else \
                b"T" + np.asarray(made, dtype=np.int8).tobytes()
        except Exception as exc:   # NCCL's own error (no network interface, no device)
            said = b"E" + ("%s: %s" % (type(exc).__name__, " ".join(str(exc).split()))).encode()
    said = agreement.broadcast_bytes(comm, said, mpi.MAIN_RANK)
    tag, body = said[:1], said[1:]
    if tag == b"E":
        return None, body.decode(errors="replace")
    uid = body if tag == b"B" else tuple(np.frombuffer(body, dtype=np.int8).tolist())
    return nccl.NcclCommunicator(comm.Get_size(), uid, comm.Get_rank()), None


class NcclExchange:
    """allreduce and bcast of a device FlatBuffer through NCCL, queued on
    the current stream (the class docstring of the module)."""

    direct = True     # the device buffer itself goes to the wire: never pipelined by psgd

    def __init__(self, comm, buffer, communicator):
        self.comm = comm
        self.buffer = buffer
        self.nccl = communicator      # NCCL's (not mpi4py's) allReduce and bcast
        self._lib = nccl_module()[0]
        self._type = {np.dtype(np.float32): self._lib.NCCL_FLOAT32,
                      np.dtype(np.float64): self._lib.NCCL_FLOAT64}[np.dtype(buffer.dtype)]

    def _stream(self):
        return cupy_module().cuda.get_current_stream().ptr

    def allreduce(self, before=None, after=None):
        """In-place sum over the ranks; `before`/`after` as in
        psgd.mpi.Exchange.allreduce, all queued in stream order."""
        data = self.buffer.data
        if before:
            before(0, data.size)
        if data.size:
            self.nccl.allReduce(data.data.ptr, data.data.ptr, data.size, self._type,
                                self._lib.NCCL_SUM, self._stream())
        if after:
            after(0, data.size)

    def bcast(self, root=mpi.MAIN_RANK):
        data = self.buffer.data
        if data.size:
            self.nccl.bcast(data.data.ptr, data.size, self._type, root, self._stream())
