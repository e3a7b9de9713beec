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


@pytest.fixture(params=["cpu", "bits"])
def halves(request, monkeypatch):
    """fp16 compiled both ways: by the CPU's conversion instructions
    (half_cast.py, where this CPU has them) and by the integer passes
    (compiled.py, every other CPU)."""
    from psgd.compression import half_cast
    if request.param == "bits":
        monkeypatch.setattr(half_cast.LOOPS, "compiled", False)
    elif not half_cast.LOOPS.ready(jit_size()):
        pytest.skip("this CPU has no half-precision conversion instructions")
    return request.param


def jit_size():
    from psgd import jit
    return jit.MIN_SIZE


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":")[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []


def test_an_x86_cpu_with_f16c_converts_halves_itself(setting):
    """Where /proc/cpuinfo lists F16C the fast fp16 passes are in use: a
    failed detection would fall back silently, at 2-3x the cost."""
    if "f16c" not in cpu_flags():
        pytest.skip("no F16C listed in /proc/cpuinfo")
    from psgd.compression import half_cast
    setting("PSGD_ACCEL", "auto")
    assert half_cast.LOOPS.ready(jit_size())


def test_fp16_rounds_every_halfway_and_edge_as_ieee(halves, setting):
    """Every fp16 value, the midpoints between neighbours (ties to even)
    and a float32 step either side of them, subnormals, the overflow edge
    (65520 rounds up to inf) and -0.0: the compiled bits equal NumPy's
    float16 cast, the NumPy passes' too."""
    values = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)
    mid = (values[:-1] + values[1:]) / 2          # exact in float32
    step = np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))
    u = np.concatenate([values, mid, *step, [65504, 65519.99, 65520, -0.0]]).astype(np.float32)
    u = np.concatenate([u, -u])
    with np.errstate(over="ignore"):
        ieee = u.astype(np.float16)
    finite = np.isfinite(ieee)
    (_, w1, r1, ok1, _), (_, w2, r2, ok2, _) = both("fp16", u[finite], 512, setting)
    assert np.array_equal(w2.view(np.uint16), ieee[finite].view(np.uint16))
    assert np.array_equal(w1, w2) and np.array_equal(r1, r2) and ok1 and ok2
    assert not run("fp16", u, 512, setting, "auto")[3]     # 65520 and beyond: past fp16


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 1e-5, 3e4])
def test_two_byte_formats_are_bit_for_bit(kind, dtype, scale, halves, setting):
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
def test_the_same_verdict_on_values_the_format_cannot_hold(kind, bad, halves, setting):
    u = np.random.default_rng(5).standard_normal(3000).astype(np.float32)
    u[2345] = bad
    (_, _, _, ok1, _), (_, _, _, ok2, _) = both(kind, u, 512, setting)
    assert ok1 == ok2
    if not np.isfinite(bad):
        assert not ok2


@pytest.mark.parametrize("accel", ["numpy", "numexpr"])
def test_accel_numpy_keeps_the_numpy_passes(accel, setting, monkeypatch):
    from psgd.compression import one_bit_loops
    monkeypatch.setattr(one_bit_loops, "one_bit_encode", None)   # would raise if called
    run("1bit", np.ones(100, np.float32), 512, setting, accel)


def test_small_stripes_keep_the_numpy_passes(setting, monkeypatch):
    from psgd import jit
    from psgd.compression import one_bit_loops
    monkeypatch.setattr(jit, "MIN_SIZE", 1000)
    monkeypatch.setattr(one_bit_loops, "one_bit_encode", None)
    run("1bit", np.ones(999, np.float32), 512, setting, "auto")
