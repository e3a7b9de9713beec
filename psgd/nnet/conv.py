"""Conv1d and MaxPool1d on (B, C, L) inputs.

Conv1d is im2col + one GEMM: a strided (B, C, L_out, K) window view of the
padded input (no copy) is laid out as (B*L_out, C*K) rows -- the single copy
-- and multiplied by W reshaped to (O, C*K). The result is returned as a
(B, O, L_out) transposed view of the (B*L_out, O) product, so the backward
pass gets the (B*L_out, O) gradient back without a copy when the next layer
kept that layout. Backward folds window gradients back with one strided add
per kernel tap (component.fold_windows), which also serves MaxPool1d.
"""
import math

from .component import Component, fill_uniform, fold_windows, he_limit, windows


def _out_len(length, kernel, stride, padding):
    return (length + 2 * padding - kernel) // stride + 1


def _padded(xp, x, padding, fill):
    if not padding:
        return x
    b, c, length = x.shape
    out = xp.full((b, c, length + 2 * padding), fill, dtype=x.dtype)
    out[:, :, padding:padding + length] = x
    return out


def _check_geometry(name, kernel, stride, padding):
    if kernel < 1 or stride < 1 or padding < 0:
        raise ValueError("%s needs kernel >= 1, stride >= 1, padding >= 0; got %d, %d, %d"
                         % (name, kernel, stride, padding))


class Conv1d(Component):
    kind = "conv1d"

    def __init__(self, in_channels, out_channels, kernel, stride=1, padding=0):
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel, self.stride, self.padding = int(kernel), int(stride), int(padding)
        _check_geometry("Conv1d", self.kernel, self.stride, self.padding)

    def param_shapes(self):
        return [("W", (self.out_channels, self.in_channels, self.kernel)),
                ("b", (self.out_channels,))]

    def init_params(self, rng):
        # He uniform: these layers are followed by ReLU
        fill_uniform(self.W, rng, he_limit(self.in_channels * self.kernel))
        self.b[...] = 0

    def output_shape(self, input_shape):
        c, length = input_shape
        if c != self.in_channels:
            raise ValueError("Conv1d expects %d input channels, got shape %s"
                             % (self.in_channels, tuple(input_shape)))
        l_out = _out_len(length, self.kernel, self.stride, self.padding)
        if l_out < 1:
            raise ValueError("Conv1d kernel %d does not fit input length %d (padding %d)"
                             % (self.kernel, length, self.padding))
        return (self.out_channels, l_out)

    def propagate(self, x, train=True):
        xp = self.xp
        b, c, length = x.shape
        self._length = length
        win = windows(xp, _padded(xp, x, self.padding, 0), self.kernel, self.stride)
        l_out = win.shape[2]
        ck = c * self.kernel
        self._cols = win.transpose(0, 2, 1, 3).reshape(b * l_out, ck)
        y = self._cols @ self.W.reshape(self.out_channels, ck).T
        y += self.b
        return y.reshape(b, l_out, self.out_channels).transpose(0, 2, 1)

    def backpropagate(self, dy):
        xp = self.xp
        b, o, l_out = dy.shape
        ck = self.in_channels * self.kernel
        dy2 = dy.transpose(0, 2, 1).reshape(b * l_out, o)
        xp.matmul(dy2.T, self._cols, out=self.dW.reshape(o, ck))
        xp.sum(dy2, axis=0, out=self.db)
        dcols = dy2 @ self.W.reshape(o, ck)
        dwin = dcols.reshape(b, l_out, self.in_channels, self.kernel).transpose(0, 2, 1, 3)
        dx = fold_windows(xp, dwin, self._length + 2 * self.padding, self.stride, dy.dtype)
        p = self.padding
        return dx[:, :, p:p + self._length] if p else dx

    def __repr__(self):
        return "Conv1d(%d, %d, kernel=%d, stride=%d, padding=%d)" % (
            self.in_channels, self.out_channels, self.kernel, self.stride, self.padding)


class MaxPool1d(Component):
    """Max over windows of each channel; the gradient goes to the (first)
    maximum of each window. Padding is -inf, so it is never selected."""

    kind = "maxpool1d"

    def __init__(self, kernel, stride=None, padding=0):
        super().__init__()
        self.kernel = int(kernel)
        self.stride = int(stride) if stride else self.kernel
        self.padding = int(padding)
        _check_geometry("MaxPool1d", self.kernel, self.stride, self.padding)

    def output_shape(self, input_shape):
        c, length = input_shape
        l_out = _out_len(length, self.kernel, self.stride, self.padding)
        if l_out < 1:
            raise ValueError("MaxPool1d kernel %d does not fit input length %d"
                             % (self.kernel, length))
        return (c, l_out)

    def propagate(self, x, train=True):
        xp = self.xp
        self._length = x.shape[2]
        win = windows(xp, _padded(xp, x, self.padding, -math.inf), self.kernel, self.stride)
        self._arg = win.argmax(axis=3)
        return xp.take_along_axis(win, self._arg[..., None], axis=3)[..., 0]

    def backpropagate(self, dy):
        xp = self.xp
        onehot = xp.arange(self.kernel) == self._arg[..., None]
        dwin = onehot * dy[..., None]
        dx = fold_windows(xp, dwin, self._length + 2 * self.padding, self.stride, dy.dtype)
        p = self.padding
        return dx[:, :, p:p + self._length] if p else dx

    def __repr__(self):
        return "MaxPool1d(kernel=%d, stride=%d)" % (self.kernel, self.stride)
