"""psgd.create: the factory that checks a job's arguments on every rank,
agrees on them (one error raised everywhere, layouts compared), and returns
the object for this rank's role."""
import numbers
import os

import numpy as np

from .. import agreement, mpi, nccl, settings
from ..backend import array_module, off_device
from ..buffers import FlatBuffer
from ..errors import UsageError
from . import lifecycle, tracing, two_level
from .base import REGISTRY


def describe(name, options, buffer, grad_buffer, stat_buffer=None, servers=1, kind="auto"):
    """What must be the same on every rank, the settings that cut messages
    included (message_settings)."""
    return {"algorithm": name, "servers": servers, "dtype": str(buffer.dtype),
            "tensors": len(buffer.shapes), "shapes": [list(s) for s in buffer.shapes],
            "grads": None if grad_buffer is None else [list(s) for s in grad_buffer.shapes],
            "stats": None if stat_buffer is None else [list(s) for s in stat_buffer.shapes],
            "options": options, "exchange (--exchange, PSGD_EXCHANGE)": kind,
            **message_settings(REGISTRY[name].server_based)}


def message_settings(server_based):
    """Every setting (psgd/settings.py) that decides how a sync is cut
    into MPI messages: two ranks that cut it differently post calls that never
    match (a hang), or MPI's own error. The pipeline shapes only the
    collective algorithms' sums, the server piece only the server
    algorithms' model messages."""
    def by_path(name, applies=not server_based):
        value = settings.get(name)
        return ("by the path" if value is None else value) if applies else None
    return {settings.label("PSGD_MPI_CHUNK"): settings.get("PSGD_MPI_CHUNK"),
            settings.label("PSGD_MPI_PIPELINE_CHUNK"): by_path("PSGD_MPI_PIPELINE_CHUNK"),
            settings.label("PSGD_MPI_PIPELINE_THRESHOLD"): by_path("PSGD_MPI_PIPELINE_THRESHOLD"),
            settings.label("PSGD_MPI_SERVER_PIECE"): by_path("PSGD_MPI_SERVER_PIECE", server_based),
            # two levels or one: different communicator splits on two ranks hang
            settings.label("PSGD_COMPRESSION_HIERARCHY"):
                None if server_based else settings.get("PSGD_COMPRESSION_HIERARCHY")}


def create(name, params, comm=None, grads=None, stats=None, servers=None, exchange=None,
           timeline=None, **options):
    """The object for this rank's role in algorithm `name` (see docs/algorithms.md).
    Collective over `comm`: any error on any rank is raised on every rank.
    `stats`: optional non-trained arrays (BatchNorm running statistics); like
    `params` they become views into a flat buffer (`obj.stats`) that starts
    as rank 0's, and the collective algorithms average them at every sync
    with the model's weights (n_k / n, or uniform under weighting=uniform).
    `servers` (server algorithms; default 1): ranks 0..servers-1 serve, each
    one contiguous shard of the flat buffer; the other ranks work.
    `exchange`: auto | mpi | nccl, what carries the collective algorithms'
    sums (default: --exchange / PSGD_EXCHANGE, else auto; psgd/nccl.py).
    `timeline`: a file name; every rank's syncs are recorded from here on
    and rank 0 writes them there at close() (Chrome's trace event format)."""
    comm = mpi.communicator(comm)
    error, cls, resolved, buffer, grad_buffer = None, None, None, None, None
    stat_buffer = None
    try:
        problem = settings.problem()
        if problem is not None:
            raise UsageError(problem)
        kind = nccl.parse(exchange, "exchange") if exchange is not None else nccl.setting()
        if name not in REGISTRY:
            raise UsageError("unknown algorithm %r; valid: %s" % (name, ", ".join(REGISTRY)))
        cls = REGISTRY[name]
        if kind == "nccl" and cls.server_based:
            raise UsageError("exchange nccl: %s is a server algorithm, whose exchanges stay on "
                             "MPI; NCCL serves bsp, bmuf, sod and syncgrad" % name)
        servers = _check_servers(cls, servers, comm.Get_size())
        if cls.server_based and comm.Get_size() < 2:
            raise UsageError("%s needs a server and at least one worker: run with "
                             "mpirun -np 2 or more (got %d process)" % (name, comm.Get_size()))
        resolved = cls.resolve_options(options, comm.Get_size(), servers)
        buffer = _as_buffer(params, "params")
        two_level.choice()      # a bad PSGD_COMPRESSION_HIERARCHY, before any exchange
        needs_grads = cls.needs_grads
        if needs_grads and grads is None:
            raise UsageError("%s averages gradients: pass grads= (arrays shaped like params)" % name)
        if grads is not None:
            if not needs_grads:
                raise UsageError("%s does not take grads=" % name)
            grad_buffer = _as_buffer(grads, "grads", cls.grad_tail)
            if grad_buffer.shapes != buffer.shapes or grad_buffer.dtype != buffer.dtype:
                raise UsageError("grads must have the shapes and dtype of params")
        if timeline is not None:
            if not isinstance(timeline, (str, os.PathLike)):
                raise UsageError("timeline= must be a file name, got %s" % type(
                    timeline).__name__)
            timeline = os.fspath(timeline)
            problem = tracing.problem(timeline, comm.Get_rank() == 0)
            if problem:
                raise UsageError(problem)
        stats = None if stats is None else _arrays(stats, "stats")
        if stats:
            if cls.server_based:
                # psgd.torch's buffers=True refuses the same, in the same words
                raise UsageError("stats=: %s does not average statistics; the collective "
                                 "algorithms (bsp, bmuf, sod, syncgrad) do" % name)
            stat_buffer = _as_buffer(stats, "stats")
    except (UsageError, ValueError, TypeError) as exc:
        error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
    agreement.agree(comm, error)
    comm = comm.Dup()
    agreement.check_same(comm, describe(name, resolved, buffer, grad_buffer, stat_buffer, servers,
                                          kind),
                         "layout")
    role = cls.for_rank(comm.Get_rank(), servers)
    obj = role(comm, buffer, resolved, grad_buffer, stat_buffer, servers)
    obj.use_nccl(nccl.choose(comm, buffer, kind, name, cls.server_based))
    obj.exchange.bcast(mpi.MAIN_RANK)
    if obj.stat_exchange is not None:
        obj.stat_exchange.bcast(mpi.MAIN_RANK)
    obj.initialized()
    if timeline is not None:
        obj.tracing = tracing.Tracing(comm, timeline, servers if cls.server_based else 0)
    lifecycle.track(obj)
    return obj


def _check_servers(cls, servers, size):
    """The server count S (1 when not given), or a UsageError."""
    if servers is None:
        return 1
    if not cls.server_based:
        raise UsageError("servers=%r: %s is a collective algorithm (every rank works); "
                         "servers are for easgd, asgd and masgd" % (servers, cls.name))
    if isinstance(servers, (bool, np.bool_)) or not isinstance(servers, numbers.Integral) \
            or servers < 1:
        raise UsageError("servers must be an integer >= 1, got %r" % (servers,))
    if servers >= size and size > 1:
        raise UsageError("%s with %d servers needs at least %d processes (the servers and one "
                         "worker), got %d" % (cls.name, servers, servers + 1, size))
    return int(servers)


def _arrays(arrays, what):
    """`arrays` as a list, or a UsageError when it is no sequence of them."""
    if hasattr(arrays, "shape"):
        raise UsageError("%s must be a list of arrays, got one %s (pass [it])" % (
            what, type(arrays).__name__))
    if arrays is None or isinstance(arrays, (str, bytes)):
        raise UsageError("%s must be a list of arrays" % what)
    try:
        return list(arrays)
    except TypeError:
        raise UsageError("%s must be a list of arrays, got %s" % (
            what, type(arrays).__name__)) from None


def _as_buffer(arrays, what, tail=0):
    arrays = _arrays(arrays, what)
    for i, a in enumerate(arrays):
        problem = array_problem(a) or off_device(a)
        if problem:
            raise UsageError("%s[%d] is %s" % (what, i, problem))
    dtypes = {np.dtype(a.dtype) for a in arrays}
    if len(dtypes) > 1:
        raise UsageError("%s mix dtypes %s; use one of float32, float64" % (
            what, ", ".join(sorted(map(str, dtypes)))))
    if dtypes and dtypes.pop().type not in (np.float32, np.float64):
        raise UsageError("%s must be float32 or float64, got %s" % (what, arrays[0].dtype))
    return FlatBuffer.wrap(arrays, dtype=arrays[0].dtype if arrays else np.float32, tail=tail)



def array_problem(a):
    """Why `a` is not an array psgd can synchronize (NumPy's, or CuPy's on
    a GPU), or None."""
    if isinstance(a, np.ndarray):
        return None
    kind = type(a).__module__.partition(".")[0] + "." + type(a).__name__
    if kind.startswith("torch."):
        return ("a %s: psgd.create takes NumPy or CuPy arrays (psgd.torch.create(name, "
                "model) binds a torch model)" % kind)
    try:
        xp = array_module(a)
    except ImportError:     # no CuPy: nothing but NumPy arrays is ours
        xp = np
    if xp is np or not isinstance(a, xp.ndarray):
        return "not a NumPy or CuPy array (got %s)" % type(a).__name__
    return None
