"""Fused elementwise updates of the sync path.

The sync path is memory-bound, so each update here is written to make as few
passes over the buffers as the backend allows: one CuPy ElementwiseKernel on a
GPU; on the host, in-place NumPy ops run block by block (BLOCK elements at a
time), so all the ops of an update touch a block while it is in cache: one
trip through memory per update instead of one per op, and no model-sized
temporaries. numexpr (optional) is used only when PSGD_ACCEL=numexpr: on the
2-core machine of BENCHMARKS.md its per-element cost lost to the blocked NumPy
path at every size, threaded or not. PSGD_ACCEL=numpy forces NumPy.
"""
import numpy as np

from . import kernel_loops, settings
from .backend import cupy_module

try:  # optional accelerator
    import numexpr
except ImportError:  # pragma: no cover - depends on the environment
    numexpr = None

# Below this many elements numexpr's call overhead outweighs its threads.
NUMEXPR_MIN_SIZE = 1 << 16
# 512 KiB of float32 per buffer: the fastest block size measured for bmuf and
# lerp (benchmarks/accel.py); the Python cost per block is a few microseconds.
BLOCK = 1 << 17


def load_loops(a):
    """Load the compiled loops (psgd/jit.py, ~0.5 s) now if the updates of
    `a`, a flat buffer, will take them, instead of in its first update."""
    kernel_loops.ready(a)


def _on_gpu(a):
    return not isinstance(a, np.ndarray)


def _use_numexpr(a):
    if numexpr is None or settings.get("PSGD_ACCEL") != "numexpr":
        return False
    return a.size >= NUMEXPR_MIN_SIZE


def _blocks(*arrays):
    """Slices covering the arrays block by block (one slice of everything
    unless they all are 1-D, the flat buffers the algorithms pass)."""
    n = arrays[0].size
    if any(a.ndim != 1 for a in arrays):
        yield slice(None)
        return
    for lo in range(0, n, BLOCK):
        yield slice(lo, min(lo + BLOCK, n))


def blockwise(fn, *arrays):
    """fn(*slices) block by block over same-length host arrays, so that the
    NumPy ops inside fn meet each block while it is in cache (block-sized
    temporaries are cheap there); one call over the whole arrays on a GPU,
    where each op is one kernel anyway."""
    if _on_gpu(arrays[0]):
        fn(*arrays)
        return
    for s in _blocks(*arrays):
        fn(*(a[s] for a in arrays))


def _scratch(a):
    return np.empty(min(a.size, BLOCK) if a.ndim == 1 else a.shape, dtype=a.dtype)


_kernels = {}


def _kernel(name, in_params, out_params, body):
    cupy = cupy_module()
    if (cupy, name) not in _kernels:
        _kernels[cupy, name] = cupy.ElementwiseKernel(in_params, out_params, body, "psgd_" + name)
    return _kernels[cupy, name]


def lerp(a, b, alpha):
    """a <- a + alpha * (b - a), in place (the elastic force of easgd)."""
    if _on_gpu(a):
        _kernel("lerp", "T b, T alpha", "T a", "a = a + alpha * (b - a)")(b, a.dtype.type(alpha), a)
    elif kernel_loops.ready(a, b):
        kernel_loops.lerp(a, b, a.dtype.type(alpha))
    elif _use_numexpr(a):
        numexpr.evaluate("a + alpha * (b - a)", local_dict={"a": a, "b": b, "alpha": a.dtype.type(alpha)},
                         out=a, casting="same_kind")
    else:
        alpha, scratch = a.dtype.type(alpha), _scratch(a)
        for s in _blocks(a, b):
            d = scratch[:a[s].size].reshape(a[s].shape)
            np.subtract(b[s], a[s], out=d)
            d *= alpha
            a[s] += d
    return a


def axpy(a, alpha, b):
    """a <- a + alpha * b, in place."""
    if _on_gpu(a):
        _kernel("axpy", "T b, T alpha", "T a", "a = a + alpha * b")(b, a.dtype.type(alpha), a)
    elif alpha != 1.0 and kernel_loops.ready(a, b):
        kernel_loops.axpy(a, a.dtype.type(alpha), b)
    elif _use_numexpr(a):
        numexpr.evaluate("a + alpha * b", local_dict={"a": a, "b": b, "alpha": a.dtype.type(alpha)},
                         out=a, casting="same_kind")
    elif alpha == 1.0:
        a += b
    else:
        alpha, scratch = a.dtype.type(alpha), _scratch(a)
        for s in _blocks(a, b):
            d = scratch[:a[s].size].reshape(a[s].shape)
            np.multiply(b[s], alpha, out=d)
            a[s] += d
    return a


def add_scaled_difference(e, w, s, weight):
    """e <- e + weight * (w - s), in place (error feedback's contribution)."""
    t = e.dtype.type(weight)
    if kernel_loops.ready(e, w, s):
        kernel_loops.add_scaled_difference(e, w, s, t)
        return e

    def add(e, w, s):
        d = np.subtract(w, s)
        d *= t
        e += d
    blockwise(add, e, w, s)
    return e


def bmuf_update(w, w_g, D, eta, zeta, nesterov, start=None):
    """Given w = the sample-weighted mean of the workers' models, with the
    block having started from  s = w_g + start * D  (`start`: by default
    the look-ahead, eta under Nesterov, else 0; 0 after a round ended on w_g):
        G   = w - s                     the mean block delta
        D   <- eta * D + zeta * G
        w_g <- w_g + D
        w   <- w_g + look * D           (look = eta under Nesterov, else 0)
    all in place (one pass on a GPU). Folding s into D's coefficient,
    D <- (eta - zeta * start) * D + zeta * (w - w_g), avoids a temporary."""
    t = w.dtype.type
    look = eta if nesterov else 0.0
    start = look if start is None else start
    keep, zeta, look = t(eta - zeta * start), t(zeta), t(look)
    if kernel_loops.ready(w, w_g, D):
        kernel_loops.bmuf_update(w, w_g, D, keep, zeta, look)
        return w
    if _on_gpu(w):
        _kernel("bmuf", "T keep, T zeta, T look", "T w, T wg, T d",
                "T nd = keep * d + zeta * (w - wg); T ng = wg + nd;"
                " d = nd; wg = ng; w = ng + look * nd")(keep, zeta, look, w, w_g, D)
    elif _use_numexpr(w):
        env = {"w": w, "g": w_g, "d": D, "keep": keep, "zeta": zeta, "look": look}
        numexpr.evaluate("keep * d + zeta * (w - g)", local_dict=env, out=D, casting="same_kind")
        numexpr.evaluate("g + d", local_dict=env, out=w_g, casting="same_kind")
        numexpr.evaluate("g + look * d", local_dict=env, out=w, casting="same_kind")
    else:
        for s in _blocks(w, w_g, D):
            ws, gs, ds = w[s], w_g[s], D[s]
            ws -= gs
            if zeta != 1:
                ws *= zeta
            ds *= keep
            ds += ws
            gs += ds
            np.multiply(ds, look, out=ws)
            ws += gs
    return w


def bmuf_contribution(e, w, w_g, D, start, weight):
    """bmuf's compressed sync under the contract's global momentum, before
    the sum, in one pass: e_k <- e_k + weight * (w - s), the block's start
    point s = w_g + start * D made on the way and never stored (the filter
    after the sum takes G itself: bmuf_update_delta)."""
    t = e.dtype.type
    start, weight = t(start), t(weight)
    if kernel_loops.ready(e, w, w_g, D):
        kernel_loops.bmuf_contribution(e, w, w_g, D, start, weight)
        return

    def step(e, w, w_g, D):
        c = np.multiply(D, start)
        c += w_g
        np.subtract(w, c, out=c)
        c *= weight
        e += c
    blockwise(step, e, w, w_g, D)


def bmuf_update_delta(w, w_g, D, eta, zeta, look=None):
    """bmuf's filter on the compressed sum, given w = G (the mean block
    delta, as the contract's global momentum uses it), in place, in one pass:
        D   <- eta * D + zeta * G
        w_g <- w_g + D
        w   <- w_g + look * D  (Nesterov's look-ahead)  or  w_g  (look None)
    bmuf_update on s + G would round G to the model's precision first."""
    t = w.dtype.type
    eta, zeta = t(eta), t(zeta)
    if kernel_loops.ready(w, w_g, D):
        kernel_loops.bmuf_update_delta(w, w_g, D, eta, zeta, t(look or 0), look is not None)
        return

    def step(w, w_g, D):
        D *= eta
        if zeta != 1:
            w *= zeta
        D += w
        _apply_step(w, w_g, D, look)
    blockwise(step, w, w_g, D)


def bmuf_share(e, share, w, w_g, D, start, weight, eta, zeta):
    """bmuf's momentum share and its error feedback (compression_momentum =
    local), in place, in one pass:
        c   = weight * (w - s)          s = w_g + start * D, the block's start
        D_k <- eta * D_k + zeta * c     (`share`)
        e_k <- e_k + D_k                (`e`)
    The ops of the separate passes in the same order: the same bits."""
    t = e.dtype.type
    start, weight, eta, zeta = t(start), t(weight), t(eta), t(zeta)
    if kernel_loops.ready(e, share, w, w_g, D):
        kernel_loops.bmuf_share(e, share, w, w_g, D, start, weight, eta, zeta)
        return

    def step(e, share, w, w_g, D):
        c = np.multiply(D, start)
        c += w_g
        np.subtract(w, c, out=c)
        c *= weight
        share *= eta
        c *= zeta
        share += c
        e += share
    blockwise(step, e, share, w, w_g, D)


def bmuf_apply(w, w_g, D, look=None):
    """After the shares' sum D: w_g <- w_g + D, then w <- w_g + look * D
    (Nesterov's look-ahead) or w <- w_g (look None), in place, in one pass."""
    t = w.dtype.type
    if kernel_loops.ready(w, w_g, D):
        kernel_loops.bmuf_apply(w, w_g, D, t(look or 0), look is not None)
        return
    blockwise(lambda w, w_g, D: _apply_step(w, w_g, D, look), w, w_g, D)


def _apply_step(w, w_g, D, look):
    """w_g <- w_g + D;  w <- w_g + look * D, or w_g (look None): NumPy's ops."""
    w_g += D
    if look is None:
        w[...] = w_g
    else:
        np.multiply(D, w.dtype.type(look), out=w)
        w += w_g


def momentum_step(x, v, d, m, alpha):
    """Server-side momentum (masgd), in place:
        v <- m * v + d
        x <- x + alpha * v
    one pass on a GPU; on the host `d` is used as scratch and left undefined."""
    t = x.dtype.type
    m, alpha = t(m), t(alpha)
    if _on_gpu(x):
        _kernel("momentum_step", "T d, T m, T alpha", "T x, T v",
                "T nv = m * v + d; v = nv; x = x + alpha * nv")(d, m, alpha, x, v)
    elif kernel_loops.ready(x, v, d):
        kernel_loops.momentum_step(x, v, d, m, alpha)
    elif _use_numexpr(x):
        env = {"x": x, "v": v, "d": d, "m": m, "alpha": alpha}
        numexpr.evaluate("m * v + d", local_dict=env, out=v, casting="same_kind")
        numexpr.evaluate("x + alpha * v", local_dict=env, out=x, casting="same_kind")
    else:
        for s in _blocks(x, v, d):
            vs, ds = v[s], d[s]
            vs *= m
            vs += ds
            np.multiply(vs, alpha, out=ds)
            x[s] += ds
    return x


def mean_square(d):
    """mean(d * d) as a Python float: one reduction."""
    return float(d.dot(d)) / max(d.size, 1) if d.ndim == 1 else float((d * d).mean())


def delay_compensate(d, x, x_start, lam, mean_sq=None):
    """DC-ASGD's correction of a stale delta (see algorithms/staleness.py), in place:
        c = lam / mean_sq         (mean_sq: mean(d * d) unless given, the whole
                                   delta's when d is one piece of it)
        d <- d - min(c * d * d, 1) * (x - x_start)
    one reduction and one fused pass (a CuPy kernel on a GPU)."""
    t = d.dtype.type
    mean_sq = mean_square(d) if mean_sq is None else mean_sq
    if lam == 0 or mean_sq == 0.0:
        return d
    c = t(lam / mean_sq)
    if _on_gpu(d):
        _kernel("delay_compensate", "T x, T xs, T c", "T d",
                "T h = min(c * d * d, (T)1); d = d - h * (x - xs)")(x, x_start, c, d)
        return d
    h, u = _scratch(d), _scratch(d)
    for s in _blocks(d, x, x_start):
        n = d[s].size
        hs, us = h[:n].reshape(d[s].shape), u[:n].reshape(d[s].shape)
        np.multiply(d[s], d[s], out=hs)
        hs *= c
        np.minimum(hs, t(1), out=hs)
        np.subtract(x[s], x_start[s], out=us)
        us *= hs
        d[s] -= us
    return d
