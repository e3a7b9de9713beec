"""SyncBatchNorm (--sync-bn): BatchNorm of the data-parallel layers with the
batch statistics reduced across ranks, so a step sees the statistics of the
whole global minibatch, exactly as one process would.

Without it the hybrid network keeps plain BatchNorm: each rank normalises
with the statistics of its own B/N samples and only the gamma/beta gradients
are combined (neon's behaviour). Forward costs two Allreduces of F values
(the mean, then the centred second moment: the two-pass variance), backward
one of 2F.
"""
from mpi4py import MPI

from ..batchnorm import BatchNorm


class SyncBatchNorm(BatchNorm):
    kind = "batchnorm"  # the saved model is a plain BatchNorm's

    def __init__(self, num_features, collectives, axis=1, momentum=0.1, eps=1e-5):
        super().__init__(num_features, axis=axis, momentum=momentum, eps=eps)
        self.coll = collectives

    @classmethod
    def like(cls, bn, collectives):
        return cls(bn.num_features, collectives, axis=bn.axis, momentum=bn.momentum, eps=bn.eps)

    def _global_mean(self, values, reduce):
        local = values.sum(axis=reduce)
        return self.coll.allreduce(local, "activations", MPI.SUM, self.xp) / self._n

    def propagate(self, x, train=True):
        if not train:
            return super().propagate(x, train=False)
        xp = self.xp
        shape, reduce = self._layout(x)
        self._shape, self._reduce = shape, reduce
        local_n = x.size // self.num_features
        self._n = n = self.coll.size * local_n  # every rank holds B/N samples
        mean = self._global_mean(x, reduce)
        xc = x - mean.reshape(shape)
        var = self._global_mean(xc * xc, reduce)
        m = self.momentum
        self.running_mean *= 1 - m
        self.running_mean += m * mean
        self.running_var *= 1 - m
        self.running_var += (m * n / max(n - 1, 1)) * var
        self._train = True
        self._inv = (1 / xp.sqrt(var + self.eps)).reshape(shape)
        self._xhat = xc * self._inv
        return self._xhat * self.gamma.reshape(shape) + self.beta.reshape(shape)

    def backpropagate(self, dy):
        if not self._train:
            return super().backpropagate(dy)
        xp = self.xp
        shape, reduce, xhat = self._shape, self._reduce, self._xhat
        xp.sum(dy, axis=reduce, out=self.dbeta)
        xp.sum(dy * xhat, axis=reduce, out=self.dgamma)
        dxhat = dy * self.gamma.reshape(shape)
        # the global mean and variance depend on every rank's x: the two
        # projections are means over the global batch (one Allreduce of 2F)
        local = xp.stack([dxhat.sum(axis=reduce), (dxhat * xhat).sum(axis=reduce)])
        sums = self.coll.allreduce(local, "activations", MPI.SUM, xp) / self._n
        mean_d, mean_dx = sums[0].reshape(shape), sums[1].reshape(shape)
        return (dxhat - mean_d - xhat * mean_dx) * self._inv

    def __repr__(self):
        return "SyncBatchNorm(%d, axis=%d)" % (self.num_features, self.axis)
