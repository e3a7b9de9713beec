"""The quantizers against the contract, element by element: fp16 and bf16
round to nearest even (bf16 by its bit formula), 1bit's per-block means,
the residual u - D(Q(u)) left in place, and overflow reported."""
import numpy as np
import pytest

from psgd.compression import quantizer
from psgd.compression.quantizers import OneBit


def encode(kind, u, block=512):
    q = quantizer(kind, block)
    wire = np.zeros(q.nbytes(u.size), np.uint8)
    residual = u.copy()
    ok = q.encode(residual, wire)
    decoded = np.zeros_like(u)
    q.decode(wire, decoded)
    return wire, residual, decoded, ok


def bf16_reference(u):
    """The contract's formula, one element at a time."""
    out = []
    for x in np.asarray(u, np.float32):
        bits = int(x.view(np.uint32))
        top = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFFFFFF) >> 16
        out.append(np.uint32(top << 16).view(np.float32))
    return np.array(out, np.float32)


def one_bit_reference(u, block):
    """Per block: 1-bits get the mean of the non-negative u, 0-bits of the
    negative ones (0 for an empty class)."""
    out = np.empty_like(u)
    for lo in range(0, u.size, block):
        x = u[lo:lo + block]
        up = x >= 0
        high = np.float32(x[up].sum() / up.sum()) if up.any() else np.float32(0)
        low = np.float32(x[~up].sum() / (~up).sum()) if (~up).any() else np.float32(0)
        out[lo:lo + block] = np.where(up, high, low)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_rounds_to_nearest_even_and_keeps_the_residual(dtype):
    rng = np.random.default_rng(1)
    u = (rng.standard_normal(300001) * 10).astype(dtype)
    u[:3] = [1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11)]    # ties: to even
    wire, residual, decoded, ok = encode("fp16", u)
    assert ok
    expected = u.astype(np.float32).astype(np.float16)
    assert (wire.view(np.float16) == expected).all()
    assert decoded[:3].tolist() == [1.0, 1 + 2 ** -9, -1.0]
    assert (decoded == expected.astype(dtype)).all()
    assert (residual == u - decoded).all()


def test_fp16_is_numpys_cast_bit_for_bit_in_every_range():
    """psgd converts on the bits (NumPy's cast is slow below fp16's normal
    range): every finite float32 that fits, subnormal halves and ties
    included, encodes to NumPy's bits, and every half decodes to NumPy's."""
    rng = np.random.default_rng(2)
    u = np.concatenate([rng.standard_normal(20000) * scale for scale in
                        (1e-9, 1e-7, 3e-6, 1e-4, 1, 300, 3e4)] +
                       [[0.0, -0.0, 65504, 65519.99, 2 ** -14, 2 ** -24, 2 ** -25,
                         3 * 2 ** -26, 1e-45]]).astype(np.float32)
    bits = rng.integers(0, 2 ** 32, 50000, dtype=np.uint64).astype(np.uint32)
    noise = bits.view(np.float32)
    u = np.concatenate([u, noise[np.isfinite(noise)]])
    u = u[np.abs(u) <= 65504]
    wire, residual, decoded, ok = encode("fp16", u)
    assert ok
    assert (wire.view(np.uint16) == u.astype(np.float16).view(np.uint16)).all()
    assert (residual == u - decoded).all()
    every_half = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)
    finite = np.isfinite(every_half.view(np.float16))
    out = np.empty(finite.sum(), np.float32)
    quantizer("fp16").decode(every_half[finite].view(np.uint8), out)
    assert (out.view(np.uint32) ==
            every_half[finite].view(np.float16).astype(np.float32).view(np.uint32)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bf16_follows_the_bit_formula(dtype):
    rng = np.random.default_rng(2)
    u = (rng.standard_normal(5000) * 1e3).astype(dtype)
    # ties both ways, and a value whose rounding carries into the exponent
    u[:4] = np.array([0x3F808000, 0x3F818000, 0x3FFFFFFF, 0xBF808000],
                     np.uint32).view(np.float32)
    wire, residual, decoded, ok = encode("bf16", u)
    assert ok
    expected = bf16_reference(u)
    assert (decoded == expected.astype(dtype)).all()
    assert decoded[:4].tolist() == [1.0, np.float32(1.015625), 2.0, -1.0]
    assert (residual == u - decoded).all()
    big = np.ones(10, np.float32)
    big[3] = 1.0e10
    small = encode("bf16", big)[2]
    # a second encode of its own decoded values changes nothing
    assert (encode("bf16", small)[2] == small).all()


@pytest.mark.parametrize("size,block", [(1, 512), (1000, 512), (300000, 512), (1037, 100),
                                        (77, 8), (4099, 1)])
def test_one_bit_means_per_block(size, block):
    rng = np.random.default_rng(size)
    u = rng.standard_normal(size).astype(np.float32)
    if size > 200:
        u[:block] = np.abs(u[:block])           # a block with no negative element
    wire, residual, decoded, ok = encode("1bit", u, block)
    assert ok
    np.testing.assert_allclose(decoded, one_bit_reference(u, block), rtol=2e-6, atol=1e-7)
    assert (residual == u - decoded).all()
    q = OneBit(block)
    bits = wire[:(size + 7) // 8]
    assert (bits == np.packbits(u >= 0, bitorder="little")).all()
    assert q.nbytes(size) == (size + 7) // 8 + (-((size + 7) // 8)) % 4 + 8 * (-(-size // block))


def test_one_bit_is_at_most_a_25th_of_float32():
    assert OneBit(512).nbytes(10 ** 7) * 25 <= 4 * 10 ** 7


@pytest.mark.parametrize("kind", ["fp16", "bf16", "1bit"])
def test_decode_adds(kind):
    u = np.linspace(-3, 5, 2000, dtype=np.float32)
    wire = encode(kind, u)[0]
    out = np.full_like(u, 0.25)
    quantizer(kind).decode(wire, out, add=True)
    assert (out == np.float32(0.25) + encode(kind, u)[2]).all()


@pytest.mark.parametrize("kind,value", [("fp16", 65520.0), ("fp16", np.inf), ("fp16", np.nan),
                                        ("bf16", 3.4028235e38), ("bf16", np.nan),
                                        ("bf16", -np.inf), ("1bit", np.inf), ("1bit", np.nan)])
def test_values_beyond_the_format_are_reported(kind, value):
    u = np.ones(1000, np.float32)
    u[700] = value
    assert not encode(kind, u)[3]
    assert encode(kind, np.full(1000, 65504.0, np.float32))[3]
