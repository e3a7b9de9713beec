"""HybridNetwork: Krizhevsky's "one weird trick" over MPI.

Built from an ordinary Network (the one build_model returns, identical on
every rank for one seed), it keeps everything before the first fully
connected layer data-parallel -- each rank runs those layers on its own B/N
samples -- and slices every fully connected layer by output units:

    [conv, pool, ..., Flatten]  GatherRows  SlicedAffine ReLU Dropout
        GatherFeatures  SlicedAffine ReLU ...  GatherFeatures  SlicedAffine | Affine
    data-parallel (B/N rows)   model-parallel (all B rows, o/N units per rank)

and ends in a softmax-cross-entropy over sliced logits (loss.py). The
output layer is sliced when N divides the class count, else replicated (see
requirements.py); a final Softmax component is dropped (cross-entropy takes
logits). The flat parameter buffer holds the data-parallel parameters first,
so after the backward pass one in-place Allreduce of that prefix of the
gradient buffer completes the step's gradient; the sliced (and replicated)
layers' gradients are already whole where they live. Because the loss is
the mean over the global minibatch, the data-parallel share each rank
computes is already scaled by 1/B: the combination is a sum, i.e. the mean
of the per-rank per-sample averages.

The interface is Network's, collective where it says so. Parameter names
are those of the unsliced network; `state_dict()` is this rank's (sliced)
state, `full_state_dict()` gathers the single-process form and
`load_full_state()` scatters one. Dropout draws its masks per slice and per
rank (independent streams), so results with dropout differ from one
process's, as in neon.
"""
import copy
import math

import numpy as np
from mpi4py import MPI

from ... import agreement, mpi
from ...backend import to_numpy
from ...buffers import FlatBuffer
from ...errors import UsageError
from ..affine import AffineTransform
from ..batchnorm import BatchNorm
from ..loss import CrossEntropy, count_correct
from ..network import Network
from . import requirements
from . import traffic as tr
from .collectives import Collectives, mpi_type
from .gather import GatherFeatures, GatherRows
from .loss import SlicedCrossEntropy
from .sliced import SlicedAffineTransform
from .syncbn import SyncBatchNorm

#: layers that may sit between fully connected ones: they act on a slice as on the whole
ELEMENTWISE = ("relu", "sigmoid", "tanh", "dropout")


class HybridNetwork(Network):
    def __init__(self, full, comm, sync_bn=False, seed=0):
        coll = Collectives(comm)
        self.coll, self.comm = coll, comm
        self.rank, self.size = coll.rank, coll.size
        self.sync_bn = bool(sync_bn)
        comps, first, last = _split(full.components)
        requirements.check(self.size, hidden_widths(comps))
        self.num_classes = comps[last].output_dim
        self.sliced_logits = requirements.logits_sliced(self.num_classes, self.size)
        layers, origin = self._layers(comps, first, last)
        super().__init__(layers, xp=full.xp, dtype=full.dtype, seed=seed)
        self._origin = origin
        self._rename()
        self.dp_size = sum(math.prod(p.shape) for p, owner in zip(self.params, self._owners)
                           if owner < first)
        self.full_names = list(full.param_names) + list(full.stat_names)
        self.full_shapes = [tuple(v.shape) for v in list(full.params) + list(full.stat_buffer.views)]
        self.num_params_full = full.num_params
        self.input_shape = getattr(full, "input_shape", None)
        self.traffic = coll.traffic
        self.seed = seed
        self.reseed_dropout(0)
        self._loss = (SlicedCrossEntropy(self.xp, coll, self.num_classes) if self.sliced_logits
                      else CrossEntropy(self.xp))
        self.load_state_dict(self.local_state(full.state_dict()))

    # construction ------------------------------------------------------------------------
    def _layers(self, comps, first, last):
        layers, origin, coll = [], [], self.coll
        for i in range(first):
            comp = comps[i]
            if self.sync_bn and isinstance(comp, BatchNorm):
                comp = SyncBatchNorm.like(comp, coll)
            layers.append(copy.copy(comp))
            origin.append(i)
        fed_by = None  # None: the data-parallel rows; True/False: a sliced/replicated layer
        for i in range(first, len(comps)):
            comp = comps[i]
            if comp.kind == "softmax":  # only last (checked): cross-entropy takes logits
                continue
            if isinstance(comp, AffineTransform):
                sliced = i != last or self.sliced_logits
                if fed_by is None:
                    layers.append(GatherRows(coll, partial_grad=sliced))
                    origin.append(None)
                elif fed_by:
                    layers.append(GatherFeatures(coll, partial_grad=sliced))
                    origin.append(None)
                fed_by = sliced
                comp = (SlicedAffineTransform(comp.input_dim, comp.output_dim, self.rank,
                                              self.size, comp.init) if sliced else comp)
            layers.append(copy.copy(comp))
            origin.append(i)
        return layers, origin

    def _rename(self):
        """The unsliced network's names: '7.affine.W' whatever was inserted."""
        names, stat_names, rows = [], [], []
        for comp, i in zip(self.components, self._origin):
            for pname, _ in comp.param_shapes():
                names.append("%d.%s.%s" % (i, comp.kind, pname))
                rows.append(comp.rows if isinstance(comp, SlicedAffineTransform) else None)
            for sname, _ in comp.stat_shapes():
                stat_names.append("%d.%s.%s" % (i, comp.kind, sname))
        self.param_names, self.stat_names = names, stat_names
        self._rows = dict(zip(names, rows))

    def reseed_dropout(self, epoch):
        """Independent mask streams per slice (rank), restarted per epoch so
        that a resumed run draws the masks an uninterrupted one would."""
        self.reseed([self.seed, self.rank, epoch])

    # training ----------------------------------------------------------------------------
    def _labels(self, y):
        y = self.xp.asarray(y).astype(np.int64, copy=False)
        return self.coll.allgather(y, "activations", self.xp).reshape((-1,) + y.shape[1:])

    def loss_and_grad(self, x, y, loss="ce"):
        """Collective. One step on this rank's rows (every rank the same
        count); returns the loss of the whole global minibatch, fills this
        rank's gradients with its part of the full-minibatch gradient."""
        if loss != "ce":
            raise UsageError("the hybrid network trains with cross-entropy (ce), not %r" % loss)
        self.traffic.active = True
        try:
            labels = self._labels(y)
            out = self.propagate(x, train=True)
            value, dout = self._loss.value_and_grad(out, labels)
            self.backpropagate(dout)
            self.coll.allreduce_inplace(self.grad_buffer.data[:self.dp_size], "gradients")
            self.traffic.steps += 1
        finally:
            self.traffic.active = False
        return value

    def global_grad_norm(self):
        """Collective: the L2 norm of the full network's gradient (for clipping)."""
        g = self.grad_buffer.data
        shared = float(self.xp.dot(g[:self.dp_size], g[:self.dp_size]))
        own = sum(float(self.xp.sum(d * d)) for d, n in zip(self.grads, self.param_names)
                  if self._rows[n] is not None)
        sliced = np.array([own], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, [sliced, MPI.DOUBLE], op=MPI.SUM)
        sliced = float(sliced[0])
        replicated = float(self.xp.dot(g, g)) - shared - own
        return math.sqrt(shared + sliced + max(replicated, 0.0))

    # evaluation --------------------------------------------------------------------------
    def evaluate(self, x, y, batch_size=256, loss="ce"):
        """Collective: (mean loss, accuracy) over the union of every rank's
        rows (any counts, zero included: short ranks pad with ignored rows)."""
        if loss != "ce":
            raise UsageError("the hybrid network evaluates cross-entropy (ce), not %r" % loss)
        xp = self.xp
        longest = np.array([len(x)], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [longest, MPI.INT64_T], op=MPI.MAX)
        total, correct, counted = 0.0, 0, 0
        for lo in range(0, int(longest[0]), batch_size):
            rows = min(batch_size, int(longest[0]) - lo)
            xb, yb = _padded(xp, x[lo:lo + rows], y[lo:lo + rows], rows, self.dtype)
            labels = self._labels(yb)
            out = self.propagate(xb, train=False)
            if self.sliced_logits:
                value, c, k = self._loss.evaluate(out, labels)
            else:
                mean, _ = self._loss.value_and_grad(out, labels)
                c, k = count_correct(xp, out, labels)
                value = float(mean) * k
            total, correct, counted = total + value, correct + c, counted + k
        if not counted:
            return float("nan"), float("nan")
        return total / counted, correct / counted

    def predict(self, x, batch_size=None):
        # propagate() gives this rank's logit slice of the gathered rows; for
        # posteriors of given inputs use one process and the gathered model
        raise UsageError("a hybrid network does not predict: gather it with "
                         "full_state_dict() and load that into build_model's network")

    def average_stats(self):
        """Collective: BatchNorm running statistics averaged over the ranks
        (each rank's differ unless --sync-bn); Kaldi's ReduceAccStat."""
        s = self.stat_buffer
        if s.size == 0 or self.sync_bn:
            return
        mpi.Exchange(self.comm, s).allreduce()     # the stream discipline of psgd/mpi.py
        s.data /= self.size

    # state -------------------------------------------------------------------------------
    def local_state(self, full_state):
        """This rank's slice of each array of a single-process state dict
        (no MPI; names it does not know pass through unsliced)."""
        out = {}
        for name in full_state:
            rows = self._rows.get(name)
            value = np.asarray(full_state[name])
            out[name] = value[rows] if rows is not None else value
        return out

    def full_state_dict(self, root=0):
        """Collective: the single-process state dict on `root` (None elsewhere):
        slices gathered, BatchNorm statistics averaged over the ranks."""
        stats = self.stat_buffer.to_host().copy()
        if stats.size:
            self.comm.Allreduce(MPI.IN_PLACE, [stats, mpi_type(stats.dtype)], op=MPI.SUM)
            stats /= self.size
        out = {}
        for name, view in zip(self.param_names, self.params):
            if self._rows[name] is not None:
                pieces = self.coll.gather(view, root)
                if pieces is not None:
                    out[name] = pieces.reshape((-1,) + tuple(view.shape[1:]))
            elif self.rank == root:
                out[name] = to_numpy(view, copy=True)
        if self.rank != root:
            return None
        stat_views = FlatBuffer(stats, [v.shape for v in self.stat_buffer.views]).views
        out.update({n: v.copy() for n, v in zip(self.stat_names, stat_views)})
        return {n: out[n] for n in self.full_names}

    def load_full_state(self, state, root=0):
        """Collective: `root`'s single-process state dict (others pass None)
        scattered into every rank's slices."""
        error, arrays = None, None
        if self.rank == root:
            try:
                arrays = [_checked(state, n, s) for n, s in zip(self.full_names, self.full_shapes)]
            except UsageError as exc:
                error = exc
        agreement.agree(self.comm, error)
        buf = (FlatBuffer.pack(arrays, dtype=self.dtype, xp=np) if arrays is not None
               else FlatBuffer.allocate(self.full_shapes, self.dtype, np))
        self.coll.bcast(buf.data, root)
        self.load_state_dict(self.local_state(dict(zip(self.full_names, buf.views))))

    # bytes ---------------------------------------------------------------------------------
    def traffic_report(self):
        """Bytes per training step so far against pure data parallelism
        (traffic.report's dict; `traffic.describe(rep)` is the log line)."""
        return tr.report(self.traffic, self.num_params_full, self.dtype.itemsize, self.size)

    def __repr__(self):
        inner = ",\n  ".join(repr(c) for c in self.components)
        return "HybridNetwork(rank %d of %d, %d local params,\n  %s)" % (
            self.rank, self.size, self.num_params, inner)


def hidden_widths(components):
    """Output units of every fully connected layer but the last: the widths
    the ranks must divide (requirements.py)."""
    _, first, last = _split(components)
    return [c.output_dim for c in components[first:last] if isinstance(c, AffineTransform)]


def _split(comps):
    """(components, first FC index, last FC index); the model-parallel part
    may hold only FC layers, elementwise layers and a final Softmax."""
    comps = list(comps)
    fcs = [i for i, c in enumerate(comps) if isinstance(c, AffineTransform)]
    if not fcs:
        raise UsageError("--model-parallel needs a fully connected (affine) layer to slice")
    first, last = fcs[0], fcs[-1]
    for i in range(first, len(comps)):
        comp = comps[i]
        if isinstance(comp, AffineTransform) or comp.kind in ELEMENTWISE:
            continue
        if comp.kind == "softmax" and i == len(comps) - 1:
            continue
        raise UsageError("--model-parallel: %r cannot follow the first fully connected layer "
                         "(only affine, %s and a final softmax can)" % (comp, ", ".join(ELEMENTWISE)))
    return comps, first, last


def _padded(xp, x, y, rows, dtype):
    """x, y grown to `rows` rows: zero inputs, ignored (-1) labels."""
    if len(x) == rows:
        return x, y
    xb = xp.zeros((rows,) + tuple(x.shape[1:]), dtype=dtype)
    yb = xp.full((rows,) + tuple(y.shape[1:]), -1, dtype=np.int64)
    xb[:len(x)] = xp.asarray(x)
    yb[:len(y)] = xp.asarray(y)
    return xb, yb


def _checked(state, name, shape):
    if state is None or name not in state:
        raise UsageError("state does not fit this network: missing %r" % name)
    value = np.asarray(state[name])
    if tuple(value.shape) != tuple(shape):
        raise UsageError("state %r has shape %s, the network needs %s"
                         % (name, tuple(value.shape), tuple(shape)))
    return value
