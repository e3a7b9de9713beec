"""1bit's passes on the bits against the plain NumPy formulation of the
contract, bit for bit: the wire and the residual of every element, for the
values error feedback meets (signed zeros, tiny and subnormal values,
blocks of one class only, a short last block) and both float widths."""
import numpy as np
import pytest

from psgd.compression import one_bit


def reference(u, block):
    """Wire and residual as whole-array NumPy: maximum / minimum row sums,
    a bool select."""
    n = u.size
    up = u >= 0
    bits = np.packbits(up, bitorder="little")
    means = np.zeros((-(-n // block), 2), np.float32)
    residual = u.copy()
    for i, lo in enumerate(range(0, n, block)):
        x, b = residual[lo:lo + block], up[lo:lo + block]
        ones = np.count_nonzero(b)
        means[i, 0] = np.maximum(x, 0).sum() / max(ones, 1)
        means[i, 1] = np.minimum(x, 0).sum() / max(x.size - ones, 1)
        x -= np.where(b, means[i, 0], means[i, 1]).astype(u.dtype)
    pad = (-bits.size) % 4
    return np.concatenate([bits, np.zeros(pad, np.uint8), means.view(np.uint8).ravel()]), residual


def inputs(size, scale, dtype):
    rng = np.random.default_rng(size)
    u = (rng.standard_normal(size) * scale).astype(dtype)
    u[::7] = -0.0
    u[3::11] = 0.0
    u[5::13] = np.float32(1e-40)                 # float32 subnormals
    if size > 3000:
        u[1024:1536] = -0.0                      # a block of negative zeros
        u[2048:2560] = -np.abs(u[2048:2560])     # a block with no non-negative value
        u[2560:3072] = np.abs(u[2560:3072])
    return u


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 1e-6])
@pytest.mark.parametrize("size,block", [(1, 512), (77, 8), (1037, 100), (5000, 512),
                                        (300001, 512), (70001, 64), (4099, 1)])
def test_encode_is_the_plain_formulation_bit_for_bit(size, block, scale, dtype, passes):
    u = inputs(size, scale, dtype)
    q = one_bit.OneBit(block)
    wire, residual = np.zeros(q.nbytes(size), np.uint8), u.copy()
    assert q.encode(residual, wire)
    expected_wire, expected_residual = reference(u, block)
    if passes == "numpy":
        assert (wire == expected_wire).all()
        assert (residual.view(np.uint8) == expected_residual.view(np.uint8)).all()
    else:   # the same bits; the block sums in another order (compiled.py)
        bits = q._bits_bytes(size)
        assert (wire[:bits] == expected_wire[:bits]).all()
        np.testing.assert_allclose(wire[bits:].view(np.float32),
                                   expected_wire[bits:].view(np.float32), rtol=1e-5)
        np.testing.assert_allclose(residual, expected_residual, rtol=0,
                                   atol=1e-5 * np.abs(u).max())
    decoded = np.full_like(u, 7.0)
    q.decode(wire, decoded)
    assert ((u - decoded).view(np.uint8) == residual.view(np.uint8)).all()


def test_ones_counted_without_numpy_2s_popcount(monkeypatch, passes):
    monkeypatch.setattr(one_bit, "_bitwise_count", None)
    test_encode_is_the_plain_formulation_bit_for_bit(300001, 512, 1e-6, np.float32, passes)
