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
        # A GPU fuses a*x + y into one rounding (FMA) and NumPy does not: a
        # result near 0 from operands near 1 differs by an ulp of the operands.
        ulp = np.finfo(dtype).eps * max(np.abs(a).max(), np.abs(b).max())
        np.testing.assert_allclose(host_copy(da), host, rtol=1e-6, atol=2 * ulp)
        np.testing.assert_array_equal(host_copy(db), b)


@pytest.mark.parametrize("zeta,nesterov", [(1.0, True), (0.8, False)])
def test_bmuf_update_on_device_matches_the_host(xp, zeta, nesterov):
    host = [a.copy() for a in _arrays(3)]
    dev = [xp.asarray(a) for a in host]
    kernels.bmuf_update(*host, 0.75, zeta, nesterov)
    kernels.bmuf_update(*dev, 0.75, zeta, nesterov)
    for got, want in zip(dev, host):
        np.testing.assert_allclose(host_copy(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("look", [0.75, None])
def test_bmuf_compressed_passes_on_device_match_the_host(xp, look):
    host = [a.copy() for a in _arrays(4)]
    dev = [xp.asarray(a) for a in host]
    for arrays in (host, dev):
        e, w, w_g, D = arrays
        kernels.bmuf_contribution(e, w, w_g, D, 0.75, 0.25)
        kernels.bmuf_update_delta(e, w_g, D, 0.75, 0.8, look)
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


def test_delay_compensation_on_device_matches_the_host(xp):
    """dc's kernel casts `(T)1`: the simulated device must run it too."""
    d, x, xs = _arrays(3, dtype=np.float64)
    d[:5] *= 50                                   # some elements hit the min(., 1) cap
    host = kernels.delay_compensate(d.copy(), x, xs, 0.5)
    dev = kernels.delay_compensate(xp.asarray(d), xp.asarray(x), xp.asarray(xs), 0.5)
    np.testing.assert_allclose(host_copy(dev), host, rtol=1e-12)


def _kernel_names_in_sources():
    import os
    import re

    import psgd
    root = os.path.dirname(psgd.__file__)
    names = set()
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    text = f.read()
                names |= set(re.findall(r'_kernel\(\s*"(\w+)"', text))
                names |= {"psgd_" + n for n in re.findall(r'"psgd_(\w+)"\)', text)}
    return {n if n.startswith("psgd_") else "psgd_" + n for n in names}


def test_every_kernel_psgd_defines_has_run_on_the_device(xp):
    """A kernel no device test runs is one the simulated device never checked."""
    from psgd.nnet import fused
    a, b, c, g = (xp.asarray(v) for v in _arrays(4))
    kernels.lerp(a, b, 0.5)
    kernels.axpy(a, 0.5, b)
    kernels.bmuf_update(a, b, c, 0.5, 1.0, True)
    kernels.momentum_step(a, b, c, 0.9, 0.1)
    kernels.delay_compensate(a, b, c, 0.1)
    fused.adam(g, np.float32(0.9), np.float32(0.99), np.float32(0.01), np.float32(1e-8), a, b, c)
    fused.momentum(g, np.float32(0.9), np.float32(0.1), True, a, b)
    xp.cuda.get_current_stream().synchronize()
    ran = {name for (module, name) in kernels._kernels if module is xp} | \
        {name for (module, name) in fused._KERNELS if module is xp}
    ran = {n if n.startswith("psgd_") else "psgd_" + n for n in ran}
    assert _kernel_names_in_sources() <= ran, _kernel_names_in_sources() - ran


def test_a_part_allocates_no_mirror_until_staged_mpi_asks(xp):
    """The direct path (CUDA-aware MPI) never needs the pinned mirror."""
    simulated = getattr(xp, "device", None)
    if simulated is None:
        pytest.skip("counts the simulated device's pinned allocations")
    buf = FlatBuffer.pack([xp.asarray(np.arange(8.0))])
    before = simulated.pinned_allocations()
    part = buf.part(2, 6)
    assert simulated.pinned_allocations() == before
    assert np.shares_memory(part.host, buf.host)        # staged: the whole's mirror
    assert simulated.pinned_allocations() == before + 1
