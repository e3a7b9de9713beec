"""One-pass CuPy kernels for the hottest optimizer updates.

On a GPU the NumPy-style sequence of in-place passes costs one kernel launch
and one trip through device memory per pass; these ElementwiseKernels read
g, w and the state once and write them once. Used only when the arrays are
CuPy arrays (`usable(xp)`); the host path never imports CuPy. Set
PSGD_NO_FUSED=1 to force the unfused path (for comparisons).
"""

import numpy as np

from .. import settings
from ..backend import cupy_module

_KERNELS = {}

_ADAM = (
    "T g, T b1, T b2, T step, T eps_hat",
    "T w, T m, T v",
    """
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    w -= step * m / (sqrt(v) + eps_hat);
    """,
    "psgd_adam")

_MOMENTUM = (
    "T g, T mu, T lr, int32 nesterov",
    "T w, T v",
    """
    v = mu * v + g;
    w -= lr * (nesterov ? g + mu * v : v);
    """,
    "psgd_momentum")


def usable(xp):
    return xp is not np and not settings.get("PSGD_NO_FUSED")


def _kernel(spec):
    cupy = cupy_module()
    kernel = _KERNELS.get((cupy, spec[3]))
    if kernel is None:
        kernel = _KERNELS[cupy, spec[3]] = cupy.ElementwiseKernel(*spec)
    return kernel


def adam(g, b1, b2, step, eps_hat, w, m, v):
    """In place: m, v moments and w -= step * m / (sqrt(v) + eps_hat)."""
    _kernel(_ADAM)(g, b1, b2, step, eps_hat, w, m, v)


def momentum(g, mu, lr, nesterov, w, v):
    """In place: v = mu v + g; w -= lr * (g + mu v if nesterov else v)."""
    _kernel(_MOMENTUM)(g, mu, lr, int(nesterov), w, v)
