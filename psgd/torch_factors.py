"""syncgrad's sum of a Linear layer's weight gradient sent as its factors
(psgd.torch; no torch import here: the tensors are used through their methods).

A Linear layer's weight gradient is a product: for the rows x_r of its input
and the rows d_r of the gradient at its output, g = sum_r d_r^T x_r. So the
ranks need not sum the out x in matrix: each sends its rows, b_k d and x,
every rank gathers everyone's, and every rank forms the same sum

    G = D^T X,   D = [b_0 d_0; b_1 d_1; ...],  X = [x_0; x_1; ...]

in one matrix product, over the summed count b (Fixes 8: the count's bucket
is summed before, so 1/b scales X instead of a pass over the weight). The
gather leaves as soon as every forward call's d is in, before backward
computes the layer's own products. That is "sufficient factor broadcasting"
(Xie et al., arXiv 1512.04123; Zhang et al., Poseidon, USENIX ATC 2017).
Across all hosts' links it moves P * rows * (in + out) numbers where an
allreduce must move 2 * in * out, whatever the number of hosts: a layer is
summed this way only while that saves bytes (`saving`), and, unless asked
for (factors=True), only where the ranks span hosts and each host's link
is spared PSGD_TORCH_FACTORS_SAVING bytes a step or more: the gather is one
more collective, whose latency a small layer's saving does not repay (the
default CNN across hosts: 0.36 s an epoch through its rows, 0.26 s plain).

Each rank's slot in the gathered message has room for `capacity` rows and
opens with [rows, status]. A rank whose rows do not fit sends no rows but
its count (OVERFLOW); every rank then sees every header, takes the largest
count as the capacity from the next step on, and sums this step's gradient
as a plain range (the dense fallback: one more collective, on every rank
alike). The capacity starts at 0, so the first step learns it. The first
step that fits is checked: each rank compares the product of its own rows
with the gradient autograd left in .grad (MISMATCH if they differ: the
weight is used outside the layer's forward, a hook changed its gradient, or
.grad was not zeroed); one mismatch anywhere sends the layer back to plain
sums for good.

Under compression=fp16 or bf16 the rows travel in that format (rounded
to nearest even, as the quantizers do; no residual: the rows are not a
running sum, and each step's rounding is its own, as with DDP's fp16 hook);
a value beyond the format's range is an error on every rank naming the
sync (BEYOND). Under 1bit the layer's rows go as they are and the other
buckets in 1bit.

Every rank computes G from the same bytes in the same order, so replicas
stay identical where the ranks run the same BLAS on the same kind of CPU:
what create() compares before it chooses this path (torch_factor_choice.py,
which also says which layers go this way).
"""
import numpy as np
from mpi4py import MPI

from . import hierarchy, mpi_async
from .algorithms.compressed import RANGES
from .compression.quantizers import quantizer
from .errors import UsageError

HEADER = 16             # bytes: [rows, status] as float64, exact for any count
FITS, OVERFLOW, MISMATCH, BEYOND = 0, 1, 2, 3
CHECK_RTOL = 1e-3       # float32 products summed in another order agree far closer
ROW_FORMATS = ("fp16", "bf16")     # compression= kinds the rows travel in (1bit: as they are)


def saving(ranks, rows, fan_in, fan_out, itemsize):
    """Bytes a step that gathering every rank's rows spares each host's link,
    against an allreduce of the fan_out x fan_in gradient, with two hosts
    (more save more): half the difference of what all links carry."""
    return (2 * fan_in * fan_out - ranks * rows * (fan_in + fan_out)) * itemsize // 2


class Gather:
    """Every rank's slot to every rank, in one order all ranks share: one
    Iallgather, or, where some host has several ranks, in two levels (the
    host's slots gathered into its leader over shared memory, the leaders'
    blocks gathered across the links, the whole broadcast inside each
    host), so a host's link carries each of its ranks' rows once. On 2 hosts
    x 2 ranks, four slots of 4.2 MB: 108 ms flat (MPICH's allgather crosses
    each link with three ranks' slots), 73-78 ms so, the link's floor 67 ms
    (benchmarks/FINDINGS.md). The slots are in host order, a host's ranks
    in rank order: `at` is this rank's. Collective to make."""

    def __init__(self, comm):
        self.comm, self.levels = comm, hierarchy.create(comm)
        local = self.levels.local
        leader = np.array([comm.Get_rank()], np.int64)
        local.Bcast([leader, MPI.INT64_T], root=0)      # a host's name: its leader's rank
        table = np.empty((comm.Get_size(), 2), np.int64)
        comm.Allgather([np.array([local.Get_size(), leader[0]], np.int64), MPI.INT64_T],
                       [table, MPI.INT64_T])
        self.order = sorted(range(comm.Get_size()), key=lambda r: (table[r, 1], r))
        self.at = self.order.index(comm.Get_rank())
        self.counts = [int(table[r, 0]) for r in sorted(set(table[:, 1].tolist()))]
        self.first = self.at - local.Get_rank()         # this host's first row
        if not 1 < table[:, 0].max() < comm.Get_size():     # one rank a host, or one host
            self.close()

    def run(self, gathered):
        """Exchange `gathered` (a row a rank, this rank's at `at`), on psgd's
        transfer thread: posted there, in the order of the buckets' sums."""
        if self.levels is None:
            mpi_async.poll(self.comm.Iallgather(MPI.IN_PLACE, [gathered, MPI.BYTE]).Test)
        else:
            self._in_two_levels(gathered)

    def _in_two_levels(self, gathered):
        local, leaders = self.levels.local, self.levels.leaders
        row = gathered.shape[1]
        block = gathered[self.first:self.first + local.Get_size()]
        if self.levels.is_leader:
            mpi_async.poll(local.Igather(MPI.IN_PLACE, [block, MPI.BYTE], root=0).Test)
            sizes = [n * row for n in self.counts]
            mpi_async.poll(leaders.Iallgatherv(
                MPI.IN_PLACE, [gathered, (sizes, np.cumsum([0] + sizes[:-1]).tolist()),
                               MPI.BYTE]).Test)
        else:
            mpi_async.poll(local.Igather([gathered[self.at], MPI.BYTE], None, root=0).Test)
        mpi_async.poll(local.Ibcast([gathered, MPI.BYTE], root=0).Test)

    def close(self):
        if self.levels is not None:
            self.levels.close()
            self.levels = None


class FactorBucket(mpi_async.InFlight):
    """One Linear layer: its weight's gradient, and its bias's where the bias
    lies right behind it (G_b = the column sums of D), elements [lo, hi) of
    the gradient buffer, summed through the layer's rows while that is
    worth it. The buckets' interface: start(), wait(), started, done().

    The layer's own gradients land in tensors of its own (`zero()` points
    .grad there), not in the buffer: the transfer thread writes the product
    into the buffer while backward may still be accumulating them, and they
    are needed only for the first step's check and a plain sum's fallback.
    After the sum, .grad is the buffer's view again (`summed()`)."""

    def __init__(self, module, gather, lo, hi, members, dense, params, views, least=1):
        """gather: the rows' exchange (Gather); params, views: the members'
        tensors and their views of the buffer; least: the fewest bytes a step
        must save (saving()) to go on."""
        self.gather, self.lo, self.hi, self.members = gather, lo, hi, members
        self.params, self.views, self.least = params, views, least
        self.own = [v.new_zeros(v.shape) for v in views]    # where backward accumulates
        self.fan_out, self.fan_in = tuple(module.weight.shape)
        self.with_bias = len(members) == 2
        self.dense = dense              # a Bucket: this range summed as any other
        self.plain = False              # for good: a mismatch, or no longer worth it
        self.capacity = 0
        self.checked = False            # this rank's rows gave autograd's gradients once
        self.products = 0               # sums formed from rows (tests, benchmarks)
        self.pairs = []                 # (x, d) tensors of the backward passes since the sum
        self._calls = 0                 # forward calls since the sum whose rows will come
        self.rows_in = None             # the buckets' call once they have (Buckets)
        self._gathered = self._d = self._x = self._format = self._itemsize = None
        self._fallback = self._formed = False
        self._hook = module.register_forward_hook(self._forward)

    # -- the factors, as forward and backward make them ------------------------
    def _forward(self, module, inputs, output):
        if self.plain or not getattr(output, "requires_grad", False):
            return      # no backward will come (evaluation, no_grad)
        x = inputs[0].detach()
        pairs = self.pairs
        self._calls += 1

        def at_output(grad):
            pairs.append((x, grad.detach()))
            # every call's rows are in: the gather can leave now, while backward
            # still computes this layer's own products; not in the first step
            # that fits (it is checked against the gradients as they land), nor
            # while .grad is the buffer's view (backward would write under the
            # product: the user's own zero_grad kept the summed gradient there)
            if (len(pairs) == self._calls and self.checked and self.rows_in is not None
                    and not any(p.grad is v for p, v in zip(self.params, self.views))):
                self.rows_in(self)
        output.register_hook(at_output)

    def clear(self):
        self.pairs.clear()
        self._calls = 0

    def zero(self):
        """Zero the layer's own gradients and point .grad at them (plain: the
        buffer's views, as every other gradient's)."""
        if self.plain:
            return
        for p, own in zip(self.params, self.own):
            own.zero_()
            p.grad = own

    def summed(self):
        """.grad at the sum, in the buffer."""
        for p, view in zip(self.params, self.views):
            p.grad = view

    def close(self):
        self._hook.remove()

    def _own_grads(self, algorithm):
        """This rank's gradients of the range, as autograd left them, flat."""
        out = np.zeros(self.hi - self.lo, dtype=algorithm.grad_buffer.dtype)
        at = 0
        for p in self.params:
            n = p.numel()
            if p.grad is not None:
                out[at:at + n] = p.grad.detach().reshape(-1).numpy()
            at += n
        return out

    # -- the sum ----------------------------------------------------------------
    def start(self, algorithm, here=False):
        """Pack this rank's rows (b_k d, then x), gather every rank's and form
        D^T X / b in the buffer (on the transfer thread); plain for good, the
        range's sum as any other bucket's."""
        self._fallback, self._formed = self.plain, False
        if self.plain:     # (nothing was captured: _forward stops once plain)
            self._start_plain(algorithm, here)
            return
        gathered = self._slots(algorithm)
        self._pack(gathered[self.gather.at], algorithm)

        def job():
            self.gather.run(gathered)
            if (self._status() == FITS).all():
                self._form(algorithm)
        self._handle = mpi_async.start(job, here=here)

    def _start_plain(self, algorithm, here):
        flat = algorithm.grad_buffer.data[self.lo:self.hi]
        if not any(p.grad is v for p, v in zip(self.params, self.views)):
            flat[...] = self._own_grads(algorithm)
        if algorithm.compressing():
            self.dense.start_compressed(algorithm, here=here)
        else:
            self.dense.start(algorithm.fold, algorithm.unfold, here=here)
        self._handle = self.dense

    def _slots(self, algorithm):
        """Every rank's slot (bytes) for this sync's format, and the float
        rows they decode to."""
        kind = algorithm.compressed.kind if algorithm.compressing() else None
        self._format = quantizer(kind) if kind in ROW_FORMATS else None
        dtype = algorithm.grad_buffer.dtype
        self._itemsize = dtype.itemsize
        ranks = len(self.gather.order)
        shape = (ranks,
                 HEADER + self._nbytes(self.capacity * (self.fan_out + self.fan_in)))
        if self._gathered is None or self._gathered.shape != shape:
            self._gathered = np.zeros(shape, dtype=np.uint8)
            rows = ranks * self.capacity
            self._d = np.empty((rows, self.fan_out), dtype=dtype)
            self._x = np.empty((rows, self.fan_in), dtype=dtype)
        return self._gathered

    def _pack(self, slot, algorithm):
        xs = [x.reshape(-1, self.fan_in).numpy() for x, _ in self.pairs]
        ds = [d.reshape(-1, self.fan_out).numpy() for _, d in self.pairs]
        rows = sum(len(x) for x in xs) if algorithm.count else 0   # out of data: nothing
        header = slot[:HEADER].view(np.float64)
        header[:] = rows, FITS
        if rows > self.capacity:
            header[1] = OVERFLOW
            return
        if not rows:
            # no forward call, yet a gradient: the weight is used without the
            # layer's forward (F.linear on it, MultiheadAttention's out_proj)
            if algorithm.count and self._own_grads(algorithm).any():
                header[1] = MISMATCH
            return
        d, x = self._d[:rows], self._x[:rows]          # (the gathered rows' room, free now)
        np.concatenate(xs, out=x)
        if self.checked:            # b_k d, this rank's share of the sum, in one pass
            at, b_k = 0, d.dtype.type(algorithm.count)
            for part in ds:
                np.multiply(part, b_k, out=d[at:at + len(part)])
                at += len(part)
        else:
            np.concatenate(ds, out=d)
            if not _close(self._product(d, x), self._own_grads(algorithm)):
                header[1] = MISMATCH
                return
            self.checked = True
            algorithm.weigh(d)
        for rows_of, wire in zip((d, x), self._wires(slot, rows)):
            if self._format is None:
                wire.view(rows_of.dtype)[:] = rows_of.reshape(-1)
            elif not self._format.encode(rows_of.reshape(-1), wire):
                header[1] = BEYOND

    def _nbytes(self, numbers):
        return self._format.nbytes(numbers) if self._format else numbers * self._itemsize

    def _wires(self, slot, rows):
        """The bytes of a slot's first `rows` rows of d, and of x."""
        x_at = HEADER + self._nbytes(self.capacity * self.fan_out)
        return (slot[HEADER:HEADER + self._nbytes(rows * self.fan_out)],
                slot[x_at:x_at + self._nbytes(rows * self.fan_in)])

    def _header(self):
        header = self._gathered[:, :HEADER].view(np.float64)
        return header[:, 0].astype(np.int64), header[:, 1]

    def _status(self):
        return self._header()[1]

    def _form(self, algorithm):
        """D^T X / b and D's column sums / b into the buffer, from every
        rank's rows (b, the summed count: its range was summed before this
        one, on the same thread). 1/b scales X, not the product."""
        rows, _ = self._header()
        at = 0
        for slot, r in zip(self._gathered, rows):
            for rows_of, wire in zip((self._d[at:at + r], self._x[at:at + r]),
                                     self._wires(slot, r)):
                if self._format is None:
                    rows_of.reshape(-1)[:] = wire.view(rows_of.dtype)
                else:
                    self._format.decode(wire, rows_of.reshape(-1))
            at += r
        scale = self._d.dtype.type(1.0 / algorithm.summed_count())
        self._x[:at] *= scale
        self._product(self._d[:at], self._x[:at], algorithm.grad_buffer.data[self.lo:self.hi],
                      scale)
        self._formed = bool(at)

    def _product(self, d, x, out=None, bias_scale=1):
        """The range's gradients from rows d and x: D^T X, then D's column sums."""
        out = np.empty(self.hi - self.lo, dtype=d.dtype) if out is None else out
        weight = self.fan_out * self.fan_in
        np.matmul(d.T, x, out=out[:weight].reshape(self.fan_out, self.fan_in))
        if self.with_bias:
            d.sum(axis=0, out=out[weight:])
            if bias_scale != 1:
                out[weight:] *= bias_scale
        return out

    def finish(self, algorithm):
        """After every bucket's sum: count the product formed, or, where a
        header says the rows did not fit, did not agree or did not fit the
        format, sum the range plainly (or raise), on every rank alike."""
        if self._fallback:
            return      # summed as a plain range already
        rows, status = self._header()
        if (status == BEYOND).any():
            raise UsageError(
                "compression=%s: sync %d: the rows of a Linear layer (%d x %d) hold a value "
                "beyond %s, an inf or a NaN (the model diverged, or the format is too narrow: "
                "try bf16, or a smaller learning rate)" % (
                    algorithm.compressed.kind, algorithm.syncs + 1, self.fan_out, self.fan_in,
                    RANGES[algorithm.compressed.kind]))
        if (status == MISMATCH).any():
            self.plain = True
        elif (status == OVERFLOW).any():
            self.capacity = int(rows.max())
            self.plain = saving(len(rows), self.capacity, self.fan_in, self.fan_out,
                                algorithm.grad_buffer.dtype.itemsize) < self.least
        else:
            self.products += self._formed
            return
        self._start_plain(algorithm, here=True)
        self.wait()


def _close(mine, autograds):
    """Whether this rank's product matches the gradients autograd left."""
    return bool(np.linalg.norm(mine - autograds) <= CHECK_RTOL * np.linalg.norm(autograds))
