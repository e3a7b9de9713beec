"""psgd/kernels.py's host updates as loops compiled with Numba (psgd/jit.py):
one trip through memory per update. Each does the NumPy pass's operations in
the same order on the same types, and Numba without fastmath neither fuses
a multiply into an add nor reorders: the same bits as the NumPy passes."""
import numpy as np

from . import jit


def lerp(a, b, alpha):
    for i in range(a.size):
        a[i] += (b[i] - a[i]) * alpha


def axpy(a, alpha, b):
    for i in range(a.size):
        a[i] += b[i] * alpha


def add_scaled_difference(e, w, s, weight):
    for i in range(e.size):
        e[i] += (w[i] - s[i]) * weight


def bmuf_update(w, w_g, D, keep, zeta, look):
    for i in range(w.size):
        d = D[i] * keep + (w[i] - w_g[i]) * zeta
        g = w_g[i] + d
        D[i] = d
        w_g[i] = g
        w[i] = d * look + g


def bmuf_contribution(e, w, w_g, D, start, weight):
    for i in range(e.size):
        e[i] += (w[i] - (D[i] * start + w_g[i])) * weight


def bmuf_update_delta(w, w_g, D, eta, zeta, look, nesterov):
    for i in range(w.size):
        d = D[i] * eta + w[i] * zeta
        g = w_g[i] + d
        D[i] = d
        w_g[i] = g
        w[i] = d * look + g if nesterov else g


def bmuf_share(e, share, w, w_g, D, start, weight, eta, zeta):
    for i in range(e.size):
        c = (w[i] - (D[i] * start + w_g[i])) * weight
        sh = share[i] * eta + c * zeta
        share[i] = sh
        e[i] += sh


def bmuf_apply(w, w_g, D, look, nesterov):
    for i in range(w.size):
        g = w_g[i] + D[i]
        w_g[i] = g
        w[i] = D[i] * look + g if nesterov else g


def momentum_step(x, v, d, m, alpha):
    for i in range(x.size):
        nv = v[i] * m + d[i]
        v[i] = nv
        x[i] += nv * alpha


LOOPS = jit.Loops(globals(), ("lerp", "axpy", "add_scaled_difference", "bmuf_update",
                              "bmuf_contribution", "bmuf_update_delta", "bmuf_share",
                              "bmuf_apply", "momentum_step"))


def ready(*arrays):
    """Whether these arrays go through the loops: on the host (a device
    array takes the kernels' CuPy path), flat, contiguous and large enough
    (jit.MIN_SIZE)."""
    return (all(isinstance(a, np.ndarray) and a.ndim == 1 and a.flags.c_contiguous
                for a in arrays)
            and LOOPS.ready(arrays[0].size))
