"""AffineTransform: y = x W^T + b over the last axis (any leading axes).

Leading axes make it time-distributed for free: (B, T, H) -> (B, T, out) is
one matmul on the (B*T, H) reshape, not a loop over frames.
"""
from .component import Component, fill_uniform, glorot_limit, he_limit

INITS = ("glorot", "he")


class AffineTransform(Component):
    kind = "affine"

    def __init__(self, input_dim, output_dim, init="glorot"):
        super().__init__()
        if init not in INITS:
            raise ValueError("init must be one of %s, got %r" % (", ".join(INITS), init))
        self.input_dim = int(input_dim)
        self.output_dim = int(output_dim)
        self.init = init

    def param_shapes(self):
        # W is (out, in) like Kaldi's linearity and PyTorch's Linear
        return [("W", (self.output_dim, self.input_dim)), ("b", (self.output_dim,))]

    def init_params(self, rng):
        limit = (he_limit(self.input_dim) if self.init == "he"
                 else glorot_limit(self.input_dim, self.output_dim))
        fill_uniform(self.W, rng, limit)
        self.b[...] = 0

    def output_shape(self, input_shape):
        if input_shape[-1] != self.input_dim:
            raise ValueError("AffineTransform expects last dim %d, got shape %s"
                             % (self.input_dim, tuple(input_shape)))
        return tuple(input_shape[:-1]) + (self.output_dim,)

    def propagate(self, x, train=True):
        self._lead = x.shape[:-1]
        self._x = x.reshape(-1, self.input_dim)
        y = self._x @ self.W.T
        y += self.b
        return y.reshape(self._lead + (self.output_dim,))

    def backpropagate(self, dy):
        xp = self.xp
        dy = dy.reshape(-1, self.output_dim)
        xp.matmul(dy.T, self._x, out=self.dW)
        xp.sum(dy, axis=0, out=self.db)
        return (dy @ self.W).reshape(self._lead + (self.input_dim,))

    def __repr__(self):
        return "AffineTransform(%d, %d)" % (self.input_dim, self.output_dim)
