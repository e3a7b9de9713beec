"""The device kernels (ElementwiseKernels) against the host paths, on the
simulated device and, when there is one, on a GPU; the buffers' copies to
and from the pinned mirror are done when they return."""
import numpy as np
import pytest

from device_util import device_fixture
from psgd import kernels
from psgd.buffers import FlatBuffer, host_copy


xp = device_fixture()


def _arrays(count, size=37, dtype=np.float32):
    rng = np.random.default_rng(size + count)
    return [rng.standard_normal(size).astype(dtype) for _ in range(count)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lerp_axpy_on_device_match_the_host(xp, dtype):
    a, b = _arrays(2, dtype=dtype)
    for fn, args in ((kernels.lerp, (0.3,)), (kernels.axpy, (-0.7,))):
        host = fn(a.copy(), b, *args) if fn is kernels.lerp else fn(a.copy(), args[0], b)
        da, db = xp.asarray(a), xp.asarray(b)
        if fn is kernels.lerp:
            fn(da, db, *args)
        else:
            fn(da, args[0], db)
        np.testing.assert_allclose(host_copy(da), host, rtol=1e-6)
        np.testing.assert_array_equal(host_copy(db), b)


@pytest.mark.parametrize("zeta,nesterov", [(1.0, True), (0.8, False)])
def test_bmuf_update_on_device_matches_the_host(xp, zeta, nesterov):
    host = [a.copy() for a in _arrays(3)]
    dev = [xp.asarray(a) for a in host]
    kernels.bmuf_update(*host, 0.75, zeta, nesterov)
    kernels.bmuf_update(*dev, 0.75, zeta, nesterov)
    for got, want in zip(dev, host):
        np.testing.assert_allclose(host_copy(got), want, rtol=1e-5, atol=1e-6)


def test_momentum_step_on_device_matches_the_host(xp):
    x, v, d = _arrays(3, dtype=np.float64)
    hx, hv = x.copy(), v.copy()
    kernels.momentum_step(hx, hv, d.copy(), 0.9, 0.1)
    dx, dv = xp.asarray(x), xp.asarray(v)
    kernels.momentum_step(dx, dv, xp.asarray(d), 0.9, 0.1)
    np.testing.assert_allclose(host_copy(dx), hx, rtol=1e-12)
    np.testing.assert_allclose(host_copy(dv), hv, rtol=1e-12)


def test_mirror_copies_are_done_when_they_return(xp):
    buf = FlatBuffer.pack([xp.asarray(np.arange(6.0).reshape(2, 3))])
    assert buf.on_device
    buf.data *= 2                                  # queued
    host = buf.to_host()
    np.testing.assert_array_equal(host, 2 * np.arange(6.0))   # read at once, as MPI would
    host[...] = -1.0
    buf.from_host()
    host[...] = 7.0                                # MPI writing the mirror again
    assert xp.cuda.get_current_stream().done
    np.testing.assert_array_equal(host_copy(buf.data), -1.0)
