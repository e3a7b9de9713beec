"""Shape-only components: Flatten, Reshape, LastFrame."""
import math

from .component import Component


class Flatten(Component):
    """(B, d1, d2, ...) -> (B, d1*d2*...): conv features into an FC layer."""

    kind = "flatten"

    def output_shape(self, input_shape):
        return (math.prod(input_shape),)

    def propagate(self, x, train=True):
        self._shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backpropagate(self, dy):
        return dy.reshape(self._shape)


class Reshape(Component):
    """(B, *in) -> (B, *shape); e.g. MNIST-1D's (B, 40) into (B, 1, 40)."""

    kind = "reshape"

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(int(d) for d in shape)

    def output_shape(self, input_shape):
        if math.prod(input_shape) != math.prod(self.shape):
            raise ValueError("cannot reshape %s into %s" % (tuple(input_shape), self.shape))
        return self.shape

    def propagate(self, x, train=True):
        self._shape = x.shape
        return x.reshape((x.shape[0],) + self.shape)

    def backpropagate(self, dy):
        return dy.reshape(self._shape)

    def __repr__(self):
        return "Reshape(%s)" % (self.shape,)


class LastFrame(Component):
    """(B, T, H) -> (B, H): the last frame, for sequence (not frame)
    classification with a recurrent layer."""

    kind = "lastframe"

    def output_shape(self, input_shape):
        return tuple(input_shape[1:])

    def propagate(self, x, train=True):
        self._shape, self._dtype = x.shape, x.dtype
        return x[:, -1]

    def backpropagate(self, dy):
        dx = self.xp.zeros(self._shape, dtype=self._dtype)
        dx[:, -1] = dy
        return dx
