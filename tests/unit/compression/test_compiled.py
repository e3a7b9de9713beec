"""The compiled passes against the NumPy ones on the same input: the same
wire bytes and residuals (1bit: the same bits, means and residuals to
float32 rounding, since the block sums go in another order), the same
verdict on non-finite input, across ragged blocks, float64 and add."""
import numpy as np
import pytest

from psgd.compression import quantizer

SIZES = [1, 7, 8, 513, 4099, 300007]


def run(kind, u, block, setting, accel):
    setting("PSGD_ACCEL", accel)
    q = quantizer(kind, block)
    wire = np.zeros(q.nbytes(u.size), np.uint8)
    residual = u.copy()
    ok = q.encode(residual, wire)
    added = np.full_like(u, 0.25)
    q.decode(wire, added, add=True)
    return q, wire, residual, ok, added


def both(kind, u, block, setting):
    return run(kind, u, block, setting, "numpy"), run(kind, u, block, setting, "auto")


@pytest.fixture(autouse=True)
def passes(any_size):
    """Overrides the package's both-passes fixture: this file compares them."""
    pytest.importorskip("numba", reason="Numba is not installed (the 'fast' extra)")


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 1e-5, 3e4])
def test_two_byte_formats_are_bit_for_bit(kind, dtype, scale, setting):
    rng = np.random.default_rng(3)
    for n in SIZES:
        u = (rng.standard_normal(n) * scale).astype(dtype)
        (_, w1, r1, ok1, a1), (_, w2, r2, ok2, a2) = both(kind, u, 512, setting)
        assert np.array_equal(w1, w2) and ok1 == ok2
        assert np.array_equal(r1, r2) and np.array_equal(a1, a2)


@pytest.mark.parametrize("block", [512, 100, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_bit_has_the_same_bits_and_means(block, dtype, setting):
    rng = np.random.default_rng(4)
    for n in SIZES:
        u = rng.standard_normal(n).astype(dtype)
        u[: min(n, 2)] = [-0.0, 0.0][: min(n, 2)]     # -0.0 >= 0: a 1-bit
        (q, w1, r1, ok1, a1), (_, w2, r2, ok2, a2) = both("1bit", u, block, setting)
        bits = q._bits_bytes(n)
        assert np.array_equal(w1[:bits], w2[:bits]) and ok1 and ok2
        m1, m2 = (w[bits:].view(np.float32) for w in (w1, w2))
        np.testing.assert_allclose(m2, m1, rtol=2e-6)
        np.testing.assert_allclose(r2, r1, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a2, a1, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["fp16", "bf16", "1bit"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 7e4, float(np.finfo(np.float32).max)])
def test_the_same_verdict_on_values_the_format_cannot_hold(kind, bad, setting):
    u = np.random.default_rng(5).standard_normal(3000).astype(np.float32)
    u[2345] = bad
    (_, _, _, ok1, _), (_, _, _, ok2, _) = both(kind, u, 512, setting)
    assert ok1 == ok2
    if not np.isfinite(bad):
        assert not ok2


@pytest.mark.parametrize("accel", ["numpy", "numexpr"])
def test_accel_numpy_keeps_the_numpy_passes(accel, setting, monkeypatch):
    from psgd.compression import compiled
    monkeypatch.setattr(compiled, "one_bit_encode", None)   # would raise if called
    run("1bit", np.ones(100, np.float32), 512, setting, accel)


def test_small_stripes_keep_the_numpy_passes(setting, monkeypatch):
    from psgd import jit
    from psgd.compression import compiled
    monkeypatch.setattr(jit, "MIN_SIZE", 1000)
    monkeypatch.setattr(compiled, "one_bit_encode", None)
    run("1bit", np.ones(999, np.float32), 512, setting, "auto")
