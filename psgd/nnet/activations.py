"""Elementwise nonlinearities and Softmax (parameter-free components).

Each caches its output, not its input: all four derivatives are cheapest to
write in terms of y.
"""
from .component import Component


def sigmoid(xp, x):
    # the tanh form never overflows (1/(1+exp(-x)) does for x << 0 in float32)
    y = xp.tanh(x * 0.5)
    y += 1
    y *= 0.5
    return y


def softmax(xp, x):
    """Softmax over the last axis, shifted by the row max for stability."""
    y = x - x.max(axis=-1, keepdims=True)
    xp.exp(y, out=y)
    y /= y.sum(axis=-1, keepdims=True)
    return y


class ReLU(Component):
    kind = "relu"

    def propagate(self, x, train=True):
        self._y = self.xp.maximum(x, 0)
        return self._y

    def backpropagate(self, dy):
        return dy * (self._y > 0)


class Sigmoid(Component):
    kind = "sigmoid"

    def propagate(self, x, train=True):
        self._y = sigmoid(self.xp, x)
        return self._y

    def backpropagate(self, dy):
        y = self._y
        return dy * y * (1 - y)


class Tanh(Component):
    kind = "tanh"

    def propagate(self, x, train=True):
        self._y = self.xp.tanh(x)
        return self._y

    def backpropagate(self, dy):
        y = self._y
        return dy * (1 - y * y)


class Softmax(Component):
    """Softmax over the last axis. Networks trained with cross-entropy skip
    it and use the joint, stable softmax-cross-entropy in loss.py instead
    (Kaldi nnet1 does the same by passing the xent derivative straight
    through); its own backward is the full Jacobian product for other uses."""

    kind = "softmax"

    def propagate(self, x, train=True):
        self._y = softmax(self.xp, x)
        return self._y

    def backpropagate(self, dy):
        y = self._y
        return y * (dy - (dy * y).sum(axis=-1, keepdims=True))
