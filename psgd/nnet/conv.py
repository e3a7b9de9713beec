"""Conv1d and MaxPool1d on (B, C, L) inputs.

The API is (B, C, L); the memory is channels-last. Conv1d is im2col + one
GEMM: a strided (B, L_out, K, C) window view of the (B, L, C) padded input
(no copy) becomes (B*L_out, K*C) rows -- the single copy, made of
contiguous K*C blocks -- multiplied by W laid out as (O, K*C). The output is
the (B, O, L_out) transposed view of the (B*L_out, O) product, so the next
conv or pool reads it channels-last without a copy, and gradients come back
the same way. Backward folds window gradients with one strided add per
kernel tap (component.fold_windows), shared with MaxPool1d.
"""
import math

from .component import Component, fill_uniform, fold_windows, he_limit, windows


def _out_len(length, kernel, stride, padding):
    return (length + 2 * padding - kernel) // stride + 1


def _channels_last(xp, x, padding, fill):
    """(B, C, L) -> padded (B, L + 2 padding, C); a view when no padding."""
    xt = x.transpose(0, 2, 1)
    if not padding:
        return xt
    b, length, c = xt.shape
    out = xp.full((b, length + 2 * padding, c), fill, dtype=x.dtype)
    out[:, padding:padding + length] = xt
    return out


def _unpad(dxt, padding, length):
    """Channels-last padded gradient -> (B, C, L) view."""
    if padding:
        dxt = dxt[:, padding:padding + length]
    return dxt.transpose(0, 2, 1)


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

    def _wk(self):
        """W (O, C, K) laid out as (O, K*C) to match the im2col rows."""
        return self.W.transpose(0, 2, 1).reshape(self.out_channels, -1)

    def propagate(self, x, train=True):
        xp = self.xp
        b, c, length = x.shape
        self._length = length
        win = windows(xp, _channels_last(xp, x, self.padding, 0), self.kernel, self.stride)
        l_out = win.shape[1]
        self._cols = win.reshape(b * l_out, self.kernel * c)
        y = self._cols @ self._wk().T
        y += self.b
        return y.reshape(b, l_out, self.out_channels).transpose(0, 2, 1)

    def backpropagate(self, dy):
        xp = self.xp
        b, o, l_out = dy.shape
        c, k = self.in_channels, self.kernel
        dy2 = dy.transpose(0, 2, 1).reshape(b * l_out, o)
        self.dW[...] = (dy2.T @ self._cols).reshape(o, k, c).transpose(0, 2, 1)
        xp.sum(dy2, axis=0, out=self.db)
        dwin = (dy2 @ self._wk()).reshape(b, l_out, k, c)
        dxt = fold_windows(xp, dwin, self._length + 2 * self.padding, self.stride, dy.dtype)
        return _unpad(dxt, self.padding, self._length)

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
        if self.padding > self.kernel // 2:
            # a window of padding only would output -inf
            raise ValueError("MaxPool1d padding must be <= kernel // 2, got %d for kernel %d"
                             % (self.padding, self.kernel))

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
        win = windows(xp, _channels_last(xp, x, self.padding, -math.inf),
                      self.kernel, self.stride)
        # a running max over the K taps: K passes over contiguous (B, L_out, C)
        # blocks beat argmax along the strided tap axis; strict > keeps the
        # first maximum, as argmax would
        best = win[:, :, 0].copy()
        arg = xp.zeros(best.shape, dtype=xp.int8 if self.kernel < 128 else xp.int32)
        for k in range(1, self.kernel):
            tap = win[:, :, k]
            better = tap > best
            xp.copyto(best, tap, where=better)
            xp.copyto(arg, k, where=better)
        self._arg = arg                                  # (B, L_out, C)
        return best.transpose(0, 2, 1)

    def backpropagate(self, dy):
        xp = self.xp
        onehot = xp.arange(self.kernel)[:, None] == self._arg[:, :, None, :]
        dwin = onehot * dy.transpose(0, 2, 1)[:, :, None, :]
        dxt = fold_windows(xp, dwin, self._length + 2 * self.padding, self.stride, dy.dtype)
        return _unpad(dxt, self.padding, self._length)

    def __repr__(self):
        return "MaxPool1d(kernel=%d, stride=%d)" % (self.kernel, self.stride)
