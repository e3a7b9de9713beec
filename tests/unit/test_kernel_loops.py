"""The compiled host updates (psgd/kernel_loops.py) give the NumPy passes'
bits, special values included, on buffers past jit.MIN_SIZE; below it, and
under PSGD_ACCEL=numpy, Numba is never asked."""
import numpy as np
import pytest

from psgd import jit, kernel_loops, kernels

pytest.importorskip("numba", reason="Numba is not installed (the 'fast' extra)")

N = jit.MIN_SIZE + 1001        # past the threshold, and a ragged last NumPy block


def arrays(count, dtype, seed):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(N).astype(dtype) for _ in range(count)]
    out[0][:4] = [np.inf, -np.inf, np.nan, -0.0]
    out[-1][4:7] = [np.inf, np.nan, -0.0]
    return out


UPDATES = {
    "lerp": (2, lambda a: kernels.lerp(a[0], a[1], 0.3)),
    "axpy": (2, lambda a: kernels.axpy(a[0], -0.7, a[1])),
    "add_scaled_difference": (3, lambda a: kernels.add_scaled_difference(a[0], a[1], a[2], 0.25)),
    "bmuf_update": (3, lambda a: kernels.bmuf_update(a[0], a[1], a[2], 0.9, 0.8, True, 0.3)),
    "bmuf_update/zeta 1": (3, lambda a: kernels.bmuf_update(a[0], a[1], a[2], 0.5, 1.0, False)),
    "momentum_step": (3, lambda a: kernels.momentum_step(a[0], a[1], a[2], 0.9, 0.1)),
    "bmuf_contribution": (4, lambda a: kernels.bmuf_contribution(*a, 0.5, 0.25)),
    "bmuf_update_delta": (3, lambda a: kernels.bmuf_update_delta(*a, 0.9, 0.8, 0.9)),
    "bmuf_update_delta/no look-ahead": (3, lambda a: kernels.bmuf_update_delta(*a, 0.5, 1.0)),
    "bmuf_share": (5, lambda a: kernels.bmuf_share(*a, 0.5, 0.25, 0.5, 0.8)),
    "bmuf_share/zeta 1": (5, lambda a: kernels.bmuf_share(*a, 0.0, 0.25, 0.5, 1.0)),
    "bmuf_apply": (3, lambda a: kernels.bmuf_apply(a[0], a[1], a[2], 0.5)),
    "bmuf_apply/no look-ahead": (3, lambda a: kernels.bmuf_apply(a[0], a[1], a[2])),
}


def run(update, dtype, setting, accel):
    setting("PSGD_ACCEL", accel)
    count, fn = UPDATES[update]
    a = arrays(count, dtype, seed=len(update))
    fn(a)
    return a


@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loops_give_the_numpy_passes_bits(update, dtype, setting, monkeypatch):
    setting("PSGD_ACCEL", "auto")
    assert kernel_loops.LOOPS.ready(N)      # compiled before the spy goes in
    calls = []
    name = update.split("/")[0]
    compiled = getattr(kernel_loops, name)
    monkeypatch.setattr(kernel_loops, name, lambda *a: calls.append(1) or compiled(*a))
    expected = run(update, dtype, setting, "numpy")
    assert not calls
    got = run(update, dtype, setting, "auto")
    assert calls, "the compiled loop was not used"
    for g, e in zip(got, expected):
        if update == "momentum_step" and g is got[2]:
            continue        # d is the NumPy pass's scratch: left undefined
        assert g.view(np.uint8).tobytes() == e.view(np.uint8).tobytes()


def test_small_buffers_never_ask_numba(setting, monkeypatch):
    setting("PSGD_ACCEL", "auto")
    monkeypatch.setattr(kernel_loops.LOOPS, "_compile", lambda: pytest.fail("compiled"))
    a = np.ones(jit.MIN_SIZE - 1, np.float32)
    kernels.lerp(a, a.copy(), 0.5)
    assert not kernel_loops.ready(a)


def test_device_arrays_take_the_kernels_own_path(setting, sim):
    """A device array of any size is never handed to the host loops: bmuf's
    compressed passes on a device (psgd/compression/device.py) go through
    CuPy, with the NumPy passes' bits on the simulated device."""
    setting("PSGD_ACCEL", "auto")
    n = jit.MIN_SIZE
    rng = np.random.default_rng(1)
    host = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    assert kernel_loops.ready(*host)
    device = [sim.asarray(a) for a in host]
    assert not kernel_loops.ready(*device)
    kernels.bmuf_contribution(*device, 0.5, 0.25)
    setting("PSGD_ACCEL", "numpy")
    kernels.bmuf_contribution(*host, 0.5, 0.25)
    for d, h in zip(device, host):
        assert d.get().tobytes() == h.tobytes()
