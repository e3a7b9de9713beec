"""Softmax + cross-entropy over logits sliced by class across ranks, without
gathering the logit matrix.

Rank r holds z_r, the (rows, K/N) logits of classes r*K/N..(r+1)*K/N for
every row of the gathered minibatch, and the integer labels of all rows
(< 0: ignored). Per row:

    m   = max over ranks of max_j z_r[j]                 Allreduce MAX (rows)
    s   = sum over ranks of sum_j exp(z_r[j] - m)        Allreduce SUM  } one call
    z_t = the target's logit, from the rank holding it                 } (2 x rows)
    loss = -((z_t - m) - log s),   d loss / d z_r = (exp(z_r - m)/s - onehot_r) / count

so each rank gets the gradient of its own logits with no further exchange.
The accuracy's argmax is the lowest class index reaching m (np.argmax's
tie rule): Allreduce MIN of each rank's first index at m.
"""
import numpy as np
from mpi4py import MPI

from ...errors import UsageError


class SlicedCrossEntropy:
    name = "ce"
    takes_logits = True

    def __init__(self, xp, collectives, num_classes):
        self.xp = xp
        self.coll = collectives
        self.num_classes = int(num_classes)
        self.width = self.num_classes // collectives.size
        self.offset = collectives.rank * self.width

    def _rows(self, logits, targets):
        xp = self.xp
        z = logits.reshape(-1, self.width)
        labels = xp.asarray(targets).reshape(-1)
        if labels.dtype.kind not in "iu" or labels.shape[0] != z.shape[0]:
            raise UsageError("sliced cross-entropy needs one integer label per row: %d rows, "
                             "labels %s %s" % (z.shape[0], labels.dtype, tuple(targets.shape)))
        return z, labels

    def _statistics(self, z, labels):
        """(m, e, s, target logit, valid mask as dtype, local index, in-slice mask)."""
        xp = self.xp
        m = self.coll.allreduce(z.max(axis=1), "activations", MPI.MAX, xp)
        e = xp.exp(z - m[:, None])
        valid = labels >= 0
        local = labels - self.offset
        mine = valid & (local >= 0) & (local < self.width)
        rows = xp.arange(z.shape[0])
        col = xp.where(mine, local, 0)
        picked = xp.where(mine, z[rows, col], 0)
        sums = self.coll.allreduce(xp.stack([e.sum(axis=1), picked]), "activations",
                                   MPI.SUM, xp)
        return m, e, sums[0], sums[1], valid.astype(z.dtype), col, mine

    def value_and_grad(self, logits, targets):
        """(mean loss over counted rows, gradient of this rank's logits)."""
        xp = self.xp
        z, labels = self._rows(logits, targets)
        m, e, s, zt, valid, col, mine = self._statistics(z, labels)
        count = xp.maximum(valid.sum(), 1)
        loss = -(((zt - m) - xp.log(s)) * valid).sum() / count
        grad = e / s[:, None]
        rows = xp.arange(z.shape[0])
        grad[rows, col] -= mine.astype(z.dtype)
        grad *= (valid / count)[:, None]
        return loss, grad.reshape(logits.shape)

    def evaluate(self, logits, targets):
        """(summed loss, correct, counted) over the rows; no gradient."""
        xp = self.xp
        z, labels = self._rows(logits, targets)
        m, _, s, zt, valid, _, _ = self._statistics(z, labels)
        loss = float(-(((zt - m) - xp.log(s)) * valid).sum())
        at_max = z == m[:, None]
        first = xp.where(at_max.any(axis=1), self.offset + at_max.argmax(axis=1),
                         self.num_classes).astype(np.int64)
        pred = self.coll.allreduce(first, "activations", MPI.MIN, xp)
        ok = (pred == labels) & (labels >= 0)
        return loss, int(ok.sum()), int((labels >= 0).sum())
