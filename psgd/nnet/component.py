"""The Component contract (Kaldi nnet1 style) and shared helpers.

A component never owns its parameter memory: the Network allocates one flat
buffer for all parameters and one for all gradients and hands each component
views into them with `bind`. Everything else follows from that:

- `propagate(x, train)` caches what the backward pass needs on the instance;
- `backpropagate(dy)` OVERWRITES the gradient views in place (`out=` or
  `[...] =`) so the flat gradient buffer is complete after one backward pass
  and nothing has to be zeroed between minibatches;
- non-trained state (BatchNorm running statistics) lives in a third flat
  buffer (`stat_shapes` / `bind_stats`) that a trainer may average across
  workers (Kaldi's ReduceAccStat).

Shapes passed to `output_shape` exclude the batch axis.
"""
import math

import numpy as np

from ..backend import array_module


class Component:
    """Base class: a parameter-free identity. Subclasses override what they need."""

    #: short lower-case kind used in parameter names ("2.affine.W")
    kind = "component"

    def __init__(self):
        # the Network overwrites both; standalone use defaults to NumPy float32
        self.xp = np
        self.dtype = np.dtype(np.float32)

    # --- layout ------------------------------------------------------------
    def param_shapes(self):
        """[(name, shape), ...] of trained parameters, in bind order."""
        return []

    def stat_shapes(self):
        """[(name, shape), ...] of non-trained state averaged across workers."""
        return []

    def setup(self, xp, dtype):
        """Called by the Network before binding: array module and dtype."""
        self.xp = xp
        self.dtype = np.dtype(dtype)

    def bind(self, params, grads):
        """Receive views (in `param_shapes` order) of the flat buffers."""
        names = [n for n, _ in self.param_shapes()]
        _check_bind(self, names, params, "params")
        _check_bind(self, names, grads, "grads")
        for name, p, g in zip(names, params, grads):
            setattr(self, name, p)
            setattr(self, "d" + name, g)

    def bind_stats(self, stats):
        names = [n for n, _ in self.stat_shapes()]
        _check_bind(self, names, stats, "stats")
        for name, s in zip(names, stats):
            setattr(self, name, s)

    def init_params(self, rng):
        """Fill the bound views in place; `rng` is a numpy Generator."""

    def init_stats(self):
        """Reset non-trained state to its initial value."""

    # --- shapes ------------------------------------------------------------
    def output_shape(self, input_shape):
        return tuple(input_shape)

    # --- compute -----------------------------------------------------------
    def propagate(self, x, train=True):
        return x

    def backpropagate(self, dy):
        return dy

    def __repr__(self):
        return "%s()" % type(self).__name__


def _check_bind(component, names, arrays, what):
    arrays = list(arrays)
    if len(arrays) != len(names):
        raise ValueError("%r expects %d %s arrays, got %d"
                         % (component, len(names), what, len(arrays)))


def fill_uniform(view, rng, limit):
    """Uniform(-limit, limit) drawn on the host, copied into a (device) view."""
    xp = _module_of(view)
    host = rng.uniform(-limit, limit, size=view.shape).astype(view.dtype)
    view[...] = xp.asarray(host)


def glorot_limit(fan_in, fan_out):
    return math.sqrt(6.0 / (fan_in + fan_out))


def he_limit(fan_in):
    return math.sqrt(6.0 / fan_in)


def _module_of(array):
    return array_module(array)


def as_strided(xp, array, shape, strides):
    """`lib.stride_tricks.as_strided` of NumPy or CuPy (strides in bytes)."""
    if xp is np:
        return np.lib.stride_tricks.as_strided(array, shape=shape, strides=strides,
                                               writeable=False)
    return xp.lib.stride_tricks.as_strided(array, shape=shape, strides=strides)


def windows(xp, x, kernel, stride):
    """Channels-last (B, L, C) -> read-only view (B, L_out, kernel, C) of
    sliding windows; each window is `kernel` consecutive rows of C values,
    so a window copies as one contiguous block when x is C-contiguous."""
    b, length, c = x.shape
    l_out = (length - kernel) // stride + 1
    sb, sl, sc = x.strides
    return as_strided(xp, x, (b, l_out, kernel, c), (sb, sl * stride, sl, sc))


def fold_windows(xp, dwin, length, stride, dtype):
    """Adjoint of `windows`: sum (B, L_out, K, C) window gradients into (B, L, C).

    Overlapping windows make this a scatter-add; looping over the K kernel
    taps (not over data) keeps every step one vectorised strided add of
    (B, L_out, C) blocks, which works the same on CuPy (no np.add.at).
    Disjoint windows that tile the input need no adds at all."""
    b, l_out, kernel, c = dwin.shape
    if stride == kernel and l_out * kernel == length:
        return dwin.reshape(b, length, c)
    dx = xp.zeros((b, length, c), dtype=dtype)
    span = stride * (l_out - 1) + 1
    for k in range(kernel):
        dx[:, k:k + span:stride] += dwin[:, :, k]
    return dx
