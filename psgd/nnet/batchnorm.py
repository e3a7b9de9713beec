"""BatchNorm over one feature axis.

`axis=1` normalises features of (B, F) inputs and channels of (B, C, L)
inputs (statistics over batch and length); use `axis=-1` for (B, T, F)
frame sequences. The running mean and variance are stats, not parameters:
they live in the network's stat buffer, which a trainer averages across
workers (Kaldi's ReduceAccStat), and evaluation uses them. Momentum follows
PyTorch: running = (1 - momentum) * running + momentum * batch, with the
unbiased batch variance.
"""
from .component import Component


class BatchNorm(Component):
    kind = "batchnorm"

    def __init__(self, num_features, axis=1, momentum=0.1, eps=1e-5):
        super().__init__()
        if not 0 <= momentum <= 1:
            raise ValueError("batchnorm momentum must be in [0, 1], got %r" % (momentum,))
        self.num_features = int(num_features)
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.eps = float(eps)

    def param_shapes(self):
        return [("gamma", (self.num_features,)), ("beta", (self.num_features,))]

    def stat_shapes(self):
        return [("running_mean", (self.num_features,)), ("running_var", (self.num_features,))]

    def init_params(self, rng):
        self.gamma[...] = 1
        self.beta[...] = 0

    def init_stats(self):
        self.running_mean[...] = 0
        self.running_var[...] = 1

    def output_shape(self, input_shape):
        full = (None,) + tuple(input_shape)  # the batch axis counts for `axis`
        if full[self.axis] != self.num_features:
            raise ValueError("BatchNorm(%d, axis=%d) does not fit input shape %s"
                             % (self.num_features, self.axis, tuple(input_shape)))
        return tuple(input_shape)

    def _layout(self, x):
        axis = self.axis % x.ndim
        shape = [1] * x.ndim
        shape[axis] = self.num_features
        reduce = tuple(a for a in range(x.ndim) if a != axis)
        return tuple(shape), reduce

    def propagate(self, x, train=True):
        xp = self.xp
        shape, reduce = self._layout(x)
        self._shape, self._reduce = shape, reduce
        if train:
            n = x.size // self.num_features
            mean = x.mean(axis=reduce)
            xc = x - mean.reshape(shape)
            var = (xc * xc).mean(axis=reduce)
            m = self.momentum
            self.running_mean *= 1 - m
            self.running_mean += m * mean
            self.running_var *= 1 - m
            self.running_var += (m * n / max(n - 1, 1)) * var
        else:
            xc = x - self.running_mean.reshape(shape)
            var = self.running_var
        inv = 1 / xp.sqrt(var + self.eps)
        self._train = train
        self._inv = inv.reshape(shape)
        self._xhat = xc * self._inv
        return self._xhat * self.gamma.reshape(shape) + self.beta.reshape(shape)

    def backpropagate(self, dy):
        xp = self.xp
        shape, reduce = self._shape, self._reduce
        xhat = self._xhat
        xp.sum(dy, axis=reduce, out=self.dbeta)
        xp.sum(dy * xhat, axis=reduce, out=self.dgamma)
        dxhat = dy * self.gamma.reshape(shape)
        if not self._train:  # running statistics are constants
            return dxhat * self._inv
        # the batch mean and variance depend on x: project those directions out
        mean_d = dxhat.mean(axis=reduce, keepdims=True)
        mean_dx = (dxhat * xhat).mean(axis=reduce, keepdims=True)
        return (dxhat - mean_d - xhat * mean_dx) * self._inv

    def __repr__(self):
        return "BatchNorm(%d, axis=%d)" % (self.num_features, self.axis)
