"""syncgrad: synchronous gradient averaging every minibatch.

    g = sum_k (b_k / b) * g_k,   b = sum_k b_k
synchronize(b_k) replaces `grads` in place by g; every rank then applies the
same optimizer step to the same w, so the replicas stay identical.

The count travels inside the data (docs/algorithms.md, Fixes 8): each rank
multiplies its gradient by b_k, writes [b_k, bad] into the two tail elements
behind the gradients, and one sum carries both; every rank then divides by
the summed count. A sync is one reduction and nothing else, which a reducer
may cut into pieces started one after the other (psgd.torch's buckets):
fold() and unfold() work on any range of the buffer.

Compressed (compressed.py), the tail cannot ride in 1-bit data: each rank
adds b_k * g_k to its residual, the striped sum carries [b_k, bad] exactly
in its message headers, and the tail receives their sums, so unfold() and
close_sync() see what the plain sum would give them. A reducer's pieces are
compressed sums of their own (compress_in_parts): each with its residuals,
each carrying the count, still one exchange per piece and nothing else.

Compressed with compression_momentum = local (docs/algorithms.md, "Momentum
shares"), each rank steps its own optimizer on its own gradient (its share
of the optimizer's state) and the sync sums the steps (synchronize_step):
    u_k = step_k(g_k) = w'_k - w         rank k's optimizer, its own moments
    u   = sum_k (b_k / b) * u_k          (compressed)
    w  <- w + u
For SGD and momentum, linear in g, u is the step of the mean gradient; for
Adam each rank's moments see its own minibatch. Either way the rounding
reaches w once, not through the optimizer: Adam's per-coordinate scale
turned 1bit's block means of the gradient into equal steps.
"""
import numpy as np
from mpi4py import MPI

from .. import agreement, kernels, mpi, mpi_async, pipeline, trace
from ..buffers import FlatBuffer, host_copy
from ..errors import CollectiveUsageError, UsageError
from . import compressed
from .base import CollectiveWorker, register
from .sample_count import check_count

COUNT, BAD = -2, -1     # the tail: this rank's b_k (summed: b), ranks with a bad b_k


@register
class SyncGrad(compressed.LocalMomentum, CollectiveWorker):
    name = "syncgrad"
    needs_grads = True
    grad_tail = 2       # elements behind the gradients: [COUNT, BAD]
    OPTIONS = dict(compressed.OPTIONS, **compressed.MOMENTUM)

    def compressed_size(self):
        """The gradients, without the count's tail (before and after
        initialized() cuts the tail from grad_buffer)."""
        return self.grad_buffer.size - self.grad_buffer.tail

    def initialized(self):
        # The gradients, as users see them, and the wire: them and the tail.
        wire = self.grad_buffer
        self.grad_buffer = FlatBuffer(wire.data[:wire.size - wire.tail], wire.shapes)
        self.grad_exchange = self.make_exchange(wire)
        self._wire = wire.data
        self.reducer = self     # reduce(); psgd.torch puts its buckets here
        self._start = None      # compression_momentum=local: w before this rank's step
        self.restart()

    def restart(self):
        self.missed_steps = False

    def state_dict(self):
        return self.compression_state()

    def synchronize(self, b_k):
        """One reduction of the weighted gradients and their count. False
        (and the grads all zero) once every rank passed b_k = 0."""
        rec = trace.recorder
        start = trace.now() if rec is not None else None
        self.reducer.reduce(b_k)
        going = self.close_sync()
        if rec is not None and going:     # the timeline and the straggler line see it
            end = trace.now()
            rec.part(trace.EXCHANGE, start, end)
            rec.sync(start, end, self.syncs - 1, collective=True)
        return going

    def synchronize_step(self, b_k, step):
        """One minibatch: the mean gradient, then step() (the optimizer on
        the grads, in place); under compression_momentum=local step() on this
        rank's own gradient first, then the mean of the steps added to the
        model. False as synchronize()."""
        if not self.shares_momentum:
            going = self.synchronize(b_k)
            if going:
                step()
            return going
        w, u = self.buffer.data, self.grad_buffer.data
        if self._start is None:
            self._start = self.buffer.xp.empty_like(w)
        if b_k:     # a worker out of data adds nothing (fold), and steps nothing
            self._start[...] = w
            step()
            self.buffer.xp.subtract(w, self._start, out=u)
            w[...] = self._start
        going = self.synchronize(b_k)
        if going:
            w += u
        return going

    def reduce(self, b_k):
        """A reducer's interface: open_sync(b_k), then the sum of the whole
        buffer, fold()ed before and unfold()ed after."""
        self.open_sync(b_k)
        if self.compressing():
            self._compressed_reduce()
            return
        self.sum_folded()

    def sum_folded(self):
        """The sum of the wire, fold()ed before and unfold()ed after. Where
        that pays (across hosts; psgd/pipeline.py) it runs in chunks under
        each other's folds, the last chunk first: it holds the count every
        unfold divides by."""
        pipeline.allreduce(self.grad_exchange, before=self.fold, after=self.unfold,
                           from_end=True)

    def _compressed_reduce(self):
        self.sum_compressed(0, self._wire.size)

    def compress_in_parts(self, bounds):
        """A reducer's ranges [lo, hi) of the wire (psgd.torch's buckets),
        each summed on its own from now on (sum_compressed), with its own
        residuals: the algorithm's state, split."""
        n = self._wire.size + COUNT
        self.compressed.split([(lo, min(hi, n)) for lo, hi in bounds])

    def sum_compressed(self, lo, hi, wait=None):
        """The compressed sum of the wire's range [lo, hi) (the whole wire,
        or one of compress_in_parts'): b_k * g added to its residual, G in
        its place, the headers' exact count in the tail, then unfold. Every
        range carries the count, so each divides by it on its own."""
        g = self._wire[lo:min(hi, self._wire.size + COUNT)]
        if self._b_k:       # a worker out of data adds nothing, whatever its grads hold
            kernels.axpy(self.compressed.residual_at(lo), self._b_k, g)
        self._wire[COUNT:] = self.compressed.sum(g, self.syncs, self._b_k,
                                                 self._problem is not None, at=lo, wait=wait)
        self.unfold(lo, hi)

    def sum_compressed_async(self, lo, hi, here=False, ready=None):
        """sum_compressed on psgd's transfer thread (Exchange.allreduce_async's
        Handle), with the buffer's device current; it polls, sleeping between
        tests, so backward keeps the cores. `ready()`, called there first,
        returns once the range's gradients are written (a device's kernels)."""
        def job():
            if ready is not None:
                ready()
            self.sum_compressed(lo, hi, _polled)
        return mpi_async.start(job, self.grad_exchange.buffer.device, here)

    def open_sync(self, b_k):
        """Check b_k (a bad one is flagged in the tail, so every rank raises
        after the sum) and write it into the tail."""
        self.check_running()
        self._b_k, self._problem = check_count(b_k, self.node.size)
        tail = self._wire[COUNT:]
        tail[0] = self._b_k
        tail[1] = self._problem is not None

    @property
    def count(self):
        """This sync's b_k, as open_sync checked it (0 for a bad one)."""
        return self._b_k

    def summed_count(self):
        """b (at least 1), once the range carrying the count is summed."""
        return max(float(self._wire[COUNT]), 1.0)

    def fold(self, lo, hi):
        """g[lo:hi] *= b_k: this rank's share of the weighted sum."""
        self.weigh(self._wire[lo:min(hi, self._wire.size + COUNT)])

    def weigh(self, g):
        """g *= b_k in place (a reducer's own rows too: psgd/torch_factors.py)."""
        if self._b_k == 0:
            g.fill(0)   # a worker out of data adds nothing, whatever its grads hold
        elif self._b_k != 1:
            g *= g.dtype.type(self._b_k)

    def unfold(self, lo, hi):
        """g[lo:hi] /= b, once the tail's sum has arrived (it travels with
        the first range a reducer sends)."""
        data = self._wire
        g = data[lo:min(hi, data.size + COUNT)]
        g /= self.grad_buffer.xp.maximum(data[COUNT:COUNT + 1], 1)

    def close_sync(self):
        """After the sum: raise a bad count on every rank, end the round when
        every count was 0, or count the sync."""
        b, bad = (float(x) for x in host_copy(self._wire[COUNT:]))
        if bad:
            raise UsageError(self._problem or "%d rank(s) passed an invalid sample count "
                             "to synchronize" % int(bad))
        if b == 0:
            self.stopped = True
            self.finish()
            return False
        self.samples += self._b_k
        if self.stat_exchange is not None:
            self._average_stats(self._b_k, b, 0)
        self.syncs += 1
        return True

    def stop(self, b_k=0, step=None, state=()):
        """Fold in the last batch (b_k), then keep averaging with b_k = 0.
        `step()` applies the optimizer to the averaged gradient after each
        round so this replica stays identical to the running ones. Without
        it this rank misses steps: at the end the lowest rank that applied
        every step hands its model, and the arrays in `state` (the
        optimizer's moments, the same shapes on every rank), to the rest."""
        self.repair_state = list(state)
        if self.shares_momentum:    # the others' mean step: applied here, no step missed
            if b_k and step is None:
                raise UsageError("syncgrad: compression_momentum=local sums optimizer steps: "
                                 "stop(b_k=%r) needs step= for the last batch" % (b_k,))
            while self.synchronize_step(b_k, step):
                b_k = 0
            return
        while self.synchronize(b_k):
            b_k = 0
            if step is not None:
                step()
            else:
                self.missed_steps = True

    def finish(self):
        """Collective, once per round: repair the replicas that missed steps."""
        size = self.node.size
        flags = np.array([size if self.missed_steps else self.node.rank,
                          -int(self.missed_steps)], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [flags, MPI.INT64_T], op=MPI.MIN)
        source, someone_missed = int(flags[0]), flags[1] < 0
        self.missed_steps = False       # the next round starts whole
        state, self.repair_state = getattr(self, "repair_state", []), []
        if not someone_missed:
            return
        if source == size:
            raise CollectiveUsageError(
                "syncgrad: every rank stopped without step= and missed optimizer steps, so "
                "no replica holds the common model; pass stop(b_k, step=fn)")
        self.exchange.bcast(source)
        if state:
            agreement.check_same(self.comm, [[list(a.shape), str(a.dtype)] for a in state],
                           "syncgrad repair state")
        for array in state:
            host = host_copy(array)
            mpi.Bcast(self.comm, host.reshape(-1), source)
            if isinstance(array, np.ndarray):
                array[...] = host
            else:
                array.set(host)     # a device array


def _polled(request):
    mpi_async.poll(request.Test)
