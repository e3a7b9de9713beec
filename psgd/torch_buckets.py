"""syncgrad's gradients summed in buckets while backward still runs, as
DDP and Horovod do (psgd.torch; no torch import here: the tensors are used
through their methods).

The flat gradient buffer is cut into buckets: contiguous ranges, taken from
its end, since backward produces the last parameters' gradients first; the
count syncgrad folds into the sum (its two tail elements) rides in bucket 0.
Under compression each bucket is a compressed sum of its own (SyncGrad.
compress_in_parts): its residuals, its stripes, the count in its headers.
A hook on each parameter marks its gradient landed; a bucket starts its sum
on psgd's transfer thread (Exchange.allreduce_async) once all its gradients
have landed and every bucket before it has started, so every rank starts
them in the same order, whatever the order of its own gradients. reduce()
starts what is left (unused parameters: a zero gradient) and waits for all.
The last bucket, whose gradients land as backward ends, is always summed in
reduce(), in the caller: on the thread its sum would hide under nothing,
and the hand-offs to and from the thread cost a small model's sum several
times over (BENCHMARKS.md, the PyTorch section).

Hooks start buckets only in a step whose sample count was known before its
backward began (`expect`, set by psgd.torch.DistributedOptimizer): the count
scales the gradients before they leave. Otherwise every bucket starts in
reduce(), when synchronize(b_k) brings the count.
"""
import math
import numbers
from contextlib import contextmanager

from . import mpi, mpi_async
from .errors import UsageError
from .torch_factors import FactorBucket, Gather

DEFAULT_BUCKET_MB = 25      # DDP's bucket_cap_mb


def bucket_bytes(bucket_mb, needs_grads):
    """psgd.torch.create's bucket_mb in bytes (None: not syncgrad), or a
    UsageError naming it."""
    if bucket_mb is None:
        return DEFAULT_BUCKET_MB * 2 ** 20 if needs_grads else None
    if not needs_grads:
        raise UsageError("bucket_mb: only syncgrad sums gradients in buckets")
    if isinstance(bucket_mb, bool) or not isinstance(bucket_mb, numbers.Real) or \
            not math.isfinite(bucket_mb) or bucket_mb < 0:
        raise UsageError("bucket_mb must be a number >= 0 (megabytes of gradients per sum; "
                         "0: one bucket per tensor), got %r" % (bucket_mb,))
    return int(bucket_mb * 2 ** 20)


class Bucket(mpi_async.InFlight):
    """Elements [lo, hi) of the gradient buffer, and the parameters whose
    gradients lie there. start() sends it, wait() returns once its sum
    (divided by the summed count) is in place. Compressed, the algorithm
    sums it (start_compressed: its own residuals, the count in the headers)."""

    def __init__(self, exchange, lo, hi, members):
        self.exchange, self.lo, self.hi, self.members = exchange, lo, hi, members

    def start(self, before, after, here=False):
        """`here`: in the caller, at once (it would only wait anyway)."""
        self._handle = self.exchange.allreduce_async(*self._shifted(before, after), here=here)

    def start_compressed(self, algorithm, ready=None, here=False):
        self._handle = algorithm.sum_compressed_async(self.lo, self.hi, here, ready)

    def _shifted(self, before, after):
        lo = self.lo
        return (lambda a, b: before(lo + a, lo + b)), (lambda a, b: after(lo + a, lo + b))


def layout(sizes, tail, itemsize, bucket_bytes, factored=()):
    """[(lo, hi, members)] of the buckets over tensors of `sizes` elements
    laid out in order, then `tail` elements: from the end, each bucket
    closed once it holds at least `bucket_bytes` (0: one per tensor). A
    tensor in `factored` ({index: the indexes of its bucket}) starts a
    bucket of its own (a layer summed through its factors: its weight, and
    its bias behind it), and closes the one behind it."""
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    out, hi, members = [], offsets[-1] + tail, []
    ends = {i: offsets[i + len(m)] for i, m in factored.items()}
    behind = {k for m in factored.values() for k in m[1:]}     # a factored layer's bias
    for i in reversed(range(len(sizes))):
        if i in behind:
            continue
        if i in ends:
            if hi > ends[i]:            # what lies behind it (the count, at least)
                out.append((ends[i], hi, members))
            out.append((offsets[i], ends[i], factored[i]))
            hi, members = offsets[i], []
            continue
        members.append(i)
        if (hi - offsets[i]) * itemsize >= bucket_bytes or i == 0:
            out.append((offsets[i], hi, members))
            hi, members = offsets[i], []
    return out


class Buckets:
    """syncgrad's reducer for a torch model (SyncGrad.reducer)."""

    def __init__(self, algorithm, names, params, views, bucket_bytes, device_event=None,
                 factored=None):
        """factored: ({weight's index: (its Linear module, its bucket's
        indexes)} of the layers summed through their factors, the fewest
        bytes a step must save to go on) (torch_factor_choice.choose)."""
        self.algorithm = algorithm
        self.names, self.params, self.views = names, params, views
        self._device_event = device_event
        factored, least = factored or ({}, 1)
        self._gather = Gather(algorithm.comm) if factored else None
        wire = algorithm.grad_exchange.buffer    # the gradients and the count behind them
        self.buckets = []
        for lo, hi, m in layout([p.numel() for p in params], wire.tail, wire.dtype.itemsize,
                                bucket_bytes, {i: f[1] for i, f in factored.items()}):
            bucket = Bucket(mpi.exchange_part(algorithm.grad_exchange, lo, hi), lo, hi, m)
            if m and m[0] in factored:
                bucket = FactorBucket(factored[m[0]][0], self._gather, lo, hi, m, bucket,
                                      [params[i] for i in m], [views[i] for i in m], least)
            self.buckets.append(bucket)
        self.factor_buckets = [b for b in self.buckets if isinstance(b, FactorBucket)]
        for bucket in self.factor_buckets:
            bucket.rows_in = self._rows_in
        self._bucket_of = {i: k for k, b in enumerate(self.buckets) for i in b.members}
        self._factor_of = {i: b for b in self.factor_buckets for i in b.members}
        if algorithm.compressed is not None:    # each bucket its own residuals
            algorithm.compress_in_parts([(b.lo, b.hi) for b in self.buckets])
        self.expect = None      # () -> this step's count, read when its backward begins
        self.deferred = False   # no_sync(): gradients accumulate, nothing starts
        self._reset()
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook(i))
                       for i, p in enumerate(params)]
        algorithm.reducer = self

    def _reset(self):
        self._count = None      # the count this step's buckets carry, once armed
        for bucket in getattr(self, "factor_buckets", ()):
            bucket.clear()
        self._landed = [False] * len(self.params)
        self._waiting = [len(b.members) for b in self.buckets]
        self._next = 0          # the first bucket not started

    def _hook(self, i):
        def landed(param):
            if self.deferred or self.expect is None:
                return
            if self._count is None:
                self._count = self.expect()
                self.algorithm.open_sync(self._count)
            if self._landed[i]:
                raise UsageError(
                    "parameter %r got a second gradient in one step: its bucket has left; "
                    "run all but the last backward of an accumulated step under "
                    "`with optimizer.no_sync():`" % self.names[i])
            self._landed[i] = True
            self._adopt(i)
            k = self._bucket_of[i]
            if self._waiting[k]:        # (0: a layer whose rows were in first)
                self._waiting[k] -= 1
                if self._waiting[k] == 0:
                    self._start_ready()
        return landed

    def _rows_in(self, bucket):
        """A layer summed through its rows has them all: it is ready before
        its own gradients land."""
        if self.deferred or self.expect is None:
            return
        if self._count is None:
            self._count = self.expect()
            self.algorithm.open_sync(self._count)
        self._waiting[self.buckets.index(bucket)] = 0
        self._start_ready()

    def _adopt(self, i):
        """Point .grad at its view of the flat buffer; a gradient torch
        allocated elsewhere (zero_grad(set_to_none=True) dropped the view)
        is copied in once, a missing one (an unused parameter) is zero."""
        if i in self._factor_of and not self._factor_of[i].plain:
            return      # its own gradients stay where they landed (torch_factors.py)
        p, view = self.params[i], self.views[i]
        grad = p.grad
        if grad is view:
            return
        if grad is None:
            view.zero_()
        elif grad.data_ptr() != view.data_ptr() or grad.shape != view.shape:
            view.copy_(grad)
        p.grad = view

    def _start_ready(self):
        # the last bucket lands as backward ends: nothing is left to hide its sum
        # under, and the thread's hand-offs would only add to it (reduce() sums it)
        while self._next < len(self.buckets) - 1 and self._waiting[self._next] == 0:
            self._start(self.buckets[self._next])

    def _start(self, bucket, now=False):
        self._next += 1
        if isinstance(bucket, FactorBucket):
            bucket.start(self.algorithm, here=now)
            return
        # on a device: the gradients' kernels, queued so far, then the sum
        ready = self._device_event().synchronize if self._device_event is not None else None
        if self.algorithm.compressing():
            bucket.start_compressed(self.algorithm, ready, here=now)
            return
        fold = self.algorithm.fold
        if ready is not None:
            def fold(lo, hi, fold=fold):
                ready()
                fold(lo, hi)
        bucket.start(fold, self.algorithm.unfold, here=now)

    def reduce(self, b_k):
        """SyncGrad's reduction of this step: the buckets started from
        backward are waited for, then the rest are summed here, in order
        (the transfer thread is idle then: one thread calls MPI at a time).
        A bucket's error (a compressed overflow, raised on every rank) is
        raised once every bucket is summed: ranks whose hooks started
        different buckets before it still post the same collectives."""
        armed = self._count
        if armed is None:
            self.algorithm.open_sync(b_k)
        errors = []
        try:
            for bucket in self.buckets:
                _waited(bucket, errors)
            for k in range(self._next, len(self.buckets)):
                for i in self.buckets[k].members:
                    if not (self._landed[i] or self.algorithm.shares_momentum):
                        self._adopt(i)  # (shares: the buffer holds the step, not the grads)
                self._start(self.buckets[k], now=True)
                _waited(self.buckets[k], errors)
            if not errors:      # a layer's rows that did not fit: its plain sum now
                for bucket in self.factor_buckets:
                    bucket.finish(self.algorithm)
        finally:
            for bucket in self.factor_buckets:
                bucket.summed()
            self._reset()
        if errors:
            raise errors[0]
        if armed is not None and b_k != armed:
            raise UsageError("synchronize(%r) after a backward whose gradients left weighted "
                             "by %r samples (DistributedOptimizer's count)" % (b_k, armed))

    def close(self):
        """The hooks off the model: it trains on its own again."""
        for hook in self._hooks:
            hook.remove()
        for bucket in self.factor_buckets:
            bucket.close()
        if self._gather is not None:
            self._gather.close()
            self._gather = None

    @contextmanager
    def no_sync(self):
        self.deferred, before = True, self.deferred
        try:
            yield
        finally:
            self.deferred = before

    def zero_grad(self):
        """Zero every gradient in place (one fill) and point .grad at it."""
        self.algorithm.grad_buffer.data.fill(0)
        for p, view in zip(self.params, self.views):
            p.grad = view
        for bucket in self.factor_buckets:
            bucket.clear()
            bucket.zero()


def _waited(bucket, errors):
    try:
        bucket.wait()
    except Exception as exc:    # raised by reduce() once every bucket is summed
        errors.append(exc)
