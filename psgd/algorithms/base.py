"""Plumbing every algorithm shares: the registry, option resolution, the
broadcast of rank 0's initial model, and the collective counts-and-stop
loop (create() and the layout check are in factory.py). The algorithm files
hold only their math.
"""

import numpy as np
from mpi4py import MPI

from .. import agreement, kernels, mpi, nccl, pipeline, trace
from ..compression.feedback import is_residual
from ..errors import UsageError
from .sample_count import check_count
from . import compressed

REGISTRY = {}


def register(cls):
    """Class decorator: make `cls` creatable by `psgd.create(cls.name, ...)`."""
    REGISTRY[cls.name] = cls
    return cls


class Algorithm(mpi.Closeable):
    """A rank's synchronization object. Subclasses set `name`, `OPTIONS` and
    implement their update; `psgd.create` builds them collectively."""

    name = None
    tracing = None          # psgd.create(timeline=...): written at close()
    role = "worker"
    server_based = False
    needs_grads = False     # synchronize sums gradients (grads=), not models
    grad_tail = 0       # elements a gradient buffer holds behind the gradients
    clears_local_state = False  # the trainer clears its local optimizer after each sync
    OPTIONS = {}
    # state_dict() keys at a resume on another N (docs/algorithms.md): the
    # job's carry over; a worker's own (and compression's residuals) restart
    # as restart() makes them. Sharded: a server's shard (last axis).
    GLOBAL_STATE = WORKER_STATE = SHARDED_STATE = ()
    # keys a checkpoint may lack (taken under other options): _load_state
    # starts them as it documents
    OPTIONAL_STATE = ()
    not_compressed = None   # why compression= is refused, where it is

    @classmethod
    def workers(cls, size, servers=1):
        """N, the number of workers among `size` ranks (`servers` of them serve)."""
        return size - servers if cls.server_based else size

    @classmethod
    def resolve_options(cls, options, size, servers=1):
        unknown = sorted(set(options) - set(cls.OPTIONS))
        if cls.not_compressed and any(k.startswith("compression") for k in unknown):
            raise UsageError("%s: %s" % (min(k for k in unknown if k.startswith("compression")),
                                         cls.not_compressed))
        if unknown:
            raise UsageError("%s has no option %s; its options: %s" % (
                cls.name, ", ".join(unknown), ", ".join(sorted(cls.OPTIONS)) or "none"))
        N = cls.workers(size, servers)
        resolved = {k: opt.resolve(k, options.get(k), N) for k, opt in cls.OPTIONS.items()}
        for k, value in options.items():
            ignored = value is not None and cls.OPTIONS[k].applies and \
                cls.OPTIONS[k].applies(resolved)
            if ignored:
                raise UsageError("%s: option %s=%r %s" % (cls.name, k, value, ignored))
        return resolved

    @classmethod
    def for_rank(cls, rank, servers=1):
        """The class that plays this rank's role (servers override)."""
        return cls

    def __init__(self, comm, buffer, options, grad_buffer=None, stat_buffer=None, servers=1):
        self.comm = comm
        self.stat_buffer = stat_buffer
        self.node = mpi.Node(comm)
        self.buffer = buffer
        self.grad_buffer = grad_buffer
        self.options = options
        self.servers = servers          # server ranks 0..servers-1 (server algorithms)
        self.N = self.workers(self.node.size, servers)
        self.nccl = None                # the NCCL communicator, when NCCL carries the sums
        self.exchange = self.make_exchange(buffer)
        self.stat_exchange = (self.make_exchange(stat_buffer)
                              if stat_buffer is not None and stat_buffer.size else None)
        self.syncs = 0
        self.samples = 0
        for key, value in options.items():
            if key not in self.OPTIONS:     # self.<option> is declared once, in OPTIONS
                raise TypeError("%s: option %r is not in its OPTIONS" % (type(self).__name__, key))
            setattr(self, key, value)

    def make_exchange(self, buffer):
        """The Exchange of `buffer` over this algorithm's communicator: NCCL's
        once use_nccl gave one (psgd/nccl.py), MPI's otherwise."""
        if self.nccl is not None:
            return nccl.NcclExchange(self.comm, buffer, self.nccl)
        return mpi.Exchange(self.comm, buffer)

    def use_nccl(self, communicator):
        """psgd.create, before the first exchange: NCCL carries this object's
        sums and broadcasts (None: MPI stays)."""
        if communicator is None:
            return
        self.nccl = communicator
        self.exchange = self.make_exchange(self.buffer)
        if self.stat_exchange is not None:
            self.stat_exchange = self.make_exchange(self.stat_buffer)

    @property
    def params(self):
        return self.buffer.views

    @property
    def grads(self):
        return None if self.grad_buffer is None else self.grad_buffer.views

    def initialized(self):
        """Called once rank 0's model has reached every rank: allocate the
        algorithm's state (subclasses), then start it."""
        self.restart()

    def restart(self):
        """Bring the algorithm's state to what a fresh object holds for the
        model now in the buffer (the same on every rank): reference points
        equal to it, momentum and moments at zero."""

    def reset_to(self, params=None):
        """Collective: rank 0's `params` (a list of arrays shaped like
        `params`, or one flat array of all of them) become the common model on
        every rank, and the algorithm's state restarts as in an object freshly
        created from that model (server algorithms: the center and every
        worker's reference point; bmuf's D, sod's outer state and masgd's
        velocities at zero). Other ranks may pass None. Server algorithms
        call it between rounds: after stop() and the server's run()."""
        self.check_reset()
        error = None
        try:
            if self.node.is_main:
                self._copy_in(params)
        except (UsageError, ValueError, TypeError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(
                "%s.reset_to: rank 0's params: %s" % (self.name, exc))
        agreement.agree(self.comm, error)
        self.exchange.bcast(mpi.MAIN_RANK)
        self.restart()

    def check_reset(self):
        """Raise UsageError on this rank when reset_to may not run now: before
        any collective, since a rank in the middle of a server algorithm's
        round has a server busy in run() that would never join one."""
        self.check_open("reset_to")
        problem = self._reset_problem()
        if problem:
            raise UsageError(problem)

    def _reset_problem(self):
        """Why reset_to may not run now on this rank, or None."""
        return None

    def check_open(self, call):
        """Raise UsageError on this rank when the object was closed (its
        communicator is gone: MPI's own error otherwise)."""
        if self.comm is None:
            raise UsageError("%s rank %d: %s after close(): a closed object cannot be used "
                             "(psgd.create makes another)" % (self.name, self.node.rank, call))

    def _copy_in(self, params):
        buf, xp = self.buffer, self.buffer.xp
        if params is None:
            raise UsageError("%s.reset_to: rank 0 must pass the model" % self.name)
        if isinstance(params, (str, bytes)) or (
                not hasattr(params, "shape") and not hasattr(params, "__iter__")):
            raise UsageError("%s.reset_to: params must be a list of arrays shaped like "
                             "sync.params, or one flat array; got %s" % (
                                 self.name, type(params).__name__))
        if hasattr(params, "shape"):
            if tuple(params.shape) != (buf.size,):
                raise UsageError("%s.reset_to: a flat model has shape (%d,), got %s" % (
                    self.name, buf.size, tuple(params.shape)))
            buf.data[...] = xp.asarray(params)
            return
        params = list(params)
        for i, p in enumerate(params):
            if not hasattr(p, "shape"):
                raise UsageError("%s.reset_to: params[%d] is not an array (got %s)" % (
                    self.name, i, type(p).__name__))
        shapes = [tuple(p.shape) for p in params]
        if shapes != [tuple(s) for s in buf.shapes]:
            raise UsageError("%s.reset_to: params have shapes %s, the algorithm holds %s" % (
                self.name, shapes, [tuple(s) for s in buf.shapes]))
        for view, p in zip(buf.views, params):
            view[...] = xp.asarray(p)

    def begin_round(self):
        """Start another round after stop() (server algorithms need it; the
        collective algorithms simply go on)."""

    def state_dict(self):
        """Algorithm state for a checkpoint: name -> host array."""
        return {}

    def load_state_dict(self, state):
        for key, array in self.state_dict().items():
            if is_residual(key) or (key in self.OPTIONAL_STATE and key not in state):
                continue        # per-worker residuals: compression.feedback's rules
            if key not in state:
                raise UsageError("checkpoint lacks %s state %r" % (self.name, key))
            value = np.asarray(state[key])
            if value.shape != array.shape:
                raise UsageError("checkpoint %s state %r has shape %s, expected %s" % (
                    self.name, key, value.shape, array.shape))
        self._load_state(state)

    def _load_state(self, state):
        pass

    def is_global_state(self, key):
        """Whether state key `key` carries over to another N (else it is a
        worker's own); a key declared neither way is a TypeError."""
        if key in self.GLOBAL_STATE:
            return True
        if key in self.WORKER_STATE or is_residual(key):
            return False
        raise TypeError("%s: state key %r is declared neither in GLOBAL_STATE nor in "
                        "WORKER_STATE" % (type(self).__name__, key))

    def load_global_state(self, state):
        """After reset_to(the checkpoint's global model) at another N: take
        the global keys of `state` (sharded ones already cut to this rank's
        shard); every worker's own state stays as restart() made it."""
        fresh = self.state_dict()
        self.load_state_dict({k: state[k] if self.is_global_state(k) else v
                              for k, v in fresh.items()
                              if k in state or not self.is_global_state(k)})

    def exit_action(self):
        """(None | "stop" | "abort", why) when the process exits with this
        object live (lifecycle.py)."""
        return None, None

    def close(self):
        """Collective: release the communicator psgd.create duplicated (and
        write the timeline= trace first). The object is unusable
        afterwards; closing twice does nothing."""
        if self.tracing is not None and self.comm is not None:
            self.tracing, tracing = None, self.tracing
            tracing.finish()
        if self.nccl is not None:
            self.nccl.destroy()
            self.nccl = None
        if self.comm is not None and self.comm != MPI.COMM_NULL:
            self.comm.Free()
        self.comm = None


class CollectiveWorker(compressed.Compressing, Algorithm):
    """Every rank is a worker; one Allreduce of the counts opens each sync."""

    stopped = False
    @property
    def stats(self):
        """Views of the statistics passed as stats= (averaged at every sync)."""
        return None if self.stat_buffer is None else self.stat_buffer.views

    def synchronize(self, n_k):
        self.check_running()
        n_k, problem = check_count(n_k, self.node.size)
        rec = trace.recorder
        if rec is not None:
            start = trace.now()
        n, active, bad = self.node.allreduce_counts(n_k, problem is not None)
        if rec is not None:
            counted = trace.now()
            rec.part(trace.COUNT, start, counted)
        if bad:
            # Raised on every rank so no rank is left waiting in the next call.
            raise UsageError(problem or "%d rank(s) passed an invalid sample count "
                             "to synchronize" % bad)
        if n == 0:
            self.stopped = True
            self.finish()
            return False
        self.samples += n_k
        self.update(n_k, n, active)
        if self.stat_exchange is not None:
            self._average_stats(n_k, n, active)
        if rec is not None:
            end = trace.now()
            rec.part(trace.EXCHANGE, counted, end)
            rec.sync(start, end, self.syncs, collective=True)
        self.syncs += 1
        return True

    def check_running(self):
        """Raise UsageError on this rank when synchronize may not run now."""
        self.check_open("synchronize")
        if self.stopped:
            # The others have left this round: an Allreduce now would wait for ever.
            raise UsageError("%s rank %d: synchronize after stop (begin_round() starts another "
                             "round, on every rank)" % (self.name, self.node.rank))

    def _average_stats(self, n_k, n, active):
        """Non-trained state (BatchNorm running statistics) is averaged with
        the weights the model is averaged with (Kaldi's ReduceAccStat)."""
        s = self.stat_buffer.data
        s *= s.dtype.type(self._weight(n_k, n, active, self.uniform_weights))
        self.stat_exchange.allreduce()

    uniform_weights = False     # the mean over active workers, not by sample counts

    @staticmethod
    def _weight(n_k, n, active, uniform):
        return (1.0 / active if n_k > 0 else 0.0) if uniform else n_k / n

    def stop(self, n_k=0):
        """Fold in the last partial block, then take part with n_k = 0 until
        every worker is done."""
        while self.synchronize(n_k):
            n_k = 0

    def begin_round(self):
        """After stop(): every rank takes part in another round."""
        self.check_open("begin_round")
        self.stopped = False

    def exit_action(self):
        if self.comm is None or self.stopped:
            return None, None
        if self.syncs == 0:
            return "quiet-stop", None   # no round begun (--epochs 0): nothing to warn of
        return "stop", "exits without stop() on its %s algorithm" % self.name

    def stop_at_exit(self):
        self.stop(0)

    def average(self, n_k, n, active, uniform=False, then=None):
        """w <- sum_k (n_k / n) w_k (or the plain mean over active workers).
        `then(lo, hi)`: the algorithm's elementwise update of w[lo:hi] once
        that part of the sum has arrived; on a large buffer the exchange runs
        it chunk by chunk under the communication (psgd/pipeline.py), with
        the bits of one call at np 2."""
        w = self.buffer.data
        weight = w.dtype.type(self._weight(n_k, n, active, uniform))
        if self.compressing():
            self._compressed_average(weight, then)
            return

        def scale(lo, hi):
            w[lo:hi] *= weight
        pipeline.allreduce(self.exchange, before=scale, after=then)

    def _compressed_average(self, weight, then):
        """w <- s + G, G the compressed sum of c_k = weight * (w_k - s),
        piece by piece (every piece's c_k reads w before any is summed)."""
        w, s, e = self.buffer.data, self.start_point(), self.compressed.residual

        def contribute(lo, hi):
            kernels.add_scaled_difference(e[lo:hi], w[lo:hi], s[lo:hi], weight)

        def step(lo, hi):
            w[lo:hi] += s[lo:hi]
            if then:
                then(lo, hi)
        self.compressed.sum(w, self.syncs, before=contribute, after=step)

    def start_point(self):
        """An array holding s, the model every rank started this block from:
        the algorithm's own where it keeps s (read, never written), else made
        in the compression's scratch."""
        raise NotImplementedError

    def update(self, n_k, n, active):
        raise NotImplementedError

    def finish(self):
        """Called once when every worker has finished (synchronize -> False)."""

