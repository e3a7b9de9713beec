"""The quantizers Q and their decoders D: fp16, bf16 and 1bit.

encode(u, wire) writes Q(u) into `wire` (uint8, nbytes(u.size) of them) and
leaves the error feedback's new residual u - D(Q(u)) in u itself; decode
(wire, out, add) writes or adds D(Q(u)). Both are blocked passes over the
buffer, as psgd/kernels.py's updates: every op of a pass meets a block while
it is in cache and the only temporaries are block-sized. float64 buffers go
through float32 (Q rounds float64 -> float32 -> the format; D widens back).
A quantized stripe is self-contained: its bytes depend on its elements only.
"""
import numpy as np

from ..kernels import BLOCK

FP16_MAX = 65504.0
EXPONENT32 = np.uint32(0x7F800000)


class CompressionOverflow(ArithmeticError):
    """A value the format cannot hold (beyond its range, inf or NaN)."""


def _blocks(n, step=BLOCK):
    for lo in range(0, n, step):
        yield lo, min(lo + step, n)


def _as_float32(u, scratch):
    """u as float32: itself, or rounded into `scratch` (a float64 block)."""
    if u.dtype == np.float32:
        return u
    out = scratch[:u.size]
    np.copyto(out, u, casting="same_kind")
    return out


class _TwoBytes:
    """A format of 2 bytes per element."""

    def nbytes(self, n):
        return 2 * n


class Fp16(_TwoBytes):
    name = "fp16"

    def encode(self, u, wire):
        """Q(u) into wire, u <- u - D(Q(u)); False when a value overflowed."""
        half, ok = wire[:2 * u.size].view(np.float16), True
        scratch = np.empty(min(u.size, BLOCK), np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            for lo, hi in _blocks(u.size):
                h = half[lo:hi]
                np.copyto(h, _as_float32(u[lo:hi], scratch), casting="same_kind")
                # all exponent bits set: an inf or a NaN (isfinite on half is slow)
                ok = ok and not ((h.view(np.uint16) & 0x7C00) == 0x7C00).any()
                u[lo:hi] -= h
        return ok

    def decode(self, wire, out, add=False):
        half = wire[:2 * out.size].view(np.float16)
        if add:
            for lo, hi in _blocks(out.size):
                out[lo:hi] += half[lo:hi]
        else:
            np.copyto(out, half, casting="safe")


class Bf16(_TwoBytes):
    """The upper 16 bits of the float32 value, rounded to nearest even:
    add 0x7FFF + ((bits >> 16) & 1) to the bits, keep the upper half."""
    name = "bf16"

    def encode(self, u, wire):
        top, ok = wire[:2 * u.size].view(np.uint16), True
        f32 = np.empty(min(u.size, BLOCK), np.float32)
        r = np.empty(min(u.size, BLOCK), np.uint32)
        with np.errstate(over="ignore", invalid="ignore"):
            for lo, hi in _blocks(u.size):
                bits = _as_float32(u[lo:hi], f32).view(np.uint32)
                rs = r[:hi - lo]
                # an inf or NaN in, or a value rounded up past the largest bf16
                ok = ok and not ((bits & EXPONENT32) == EXPONENT32).any()
                np.right_shift(bits, 16, out=rs)
                rs &= 1
                rs += 0x7FFF
                rs += bits
                ok = ok and not ((rs & EXPONENT32) == EXPONENT32).any()
                np.right_shift(rs, 16, out=rs)
                np.copyto(top[lo:hi], rs, casting="unsafe")
                rs <<= 16
                u[lo:hi] -= rs.view(np.float32)
        return ok

    def decode(self, wire, out, add=False):
        top = wire[:2 * out.size].view(np.uint16)
        r = np.empty(min(out.size, BLOCK), np.uint32)
        for lo, hi in _blocks(out.size):
            rs = r[:hi - lo]
            np.copyto(rs, top[lo:hi], casting="safe")
            rs <<= 16
            if add:
                out[lo:hi] += rs.view(np.float32)
            else:
                np.copyto(out[lo:hi], rs.view(np.float32), casting="safe")


class OneBit:
    """Per block of B elements (from the stripe's first one; the last may be
    shorter): bit = u >= 0, D gives the 1-bits the mean of the block's
    non-negative u and the 0-bits the mean of its negative u (0 for an empty
    class; Seide et al.'s reconstruction, per block). Wire: the bits packed
    eight to a byte, first element in the lowest bit, padded to 4 bytes; then
    [mean of 1-bits, mean of 0-bits] as float32 per block."""
    name = "1bit"

    def __init__(self, block=512):
        self.block = int(block)
        # whole quantizer blocks, and whole bytes of bits, per pass
        self.step = self.block * 8 * max(1, BLOCK // (8 * self.block))

    def _bits_bytes(self, n):
        return (n + 7) // 8 + (-((n + 7) // 8)) % 4

    def nbytes(self, n):
        return self._bits_bytes(n) + 8 * (-(-n // self.block))

    def _parts(self, wire, n):
        nb = self._bits_bytes(n)
        return wire[:nb], wire[nb:self.nbytes(n)].view(np.float32).reshape(-1, 2)

    def _rows(self, lo, hi):
        """(blocks, B) row views of [lo, hi): the whole blocks, then the short one."""
        B = self.block
        whole = (hi - lo) // B * B
        if whole:
            yield lo, lo + whole, B
        if lo + whole < hi:
            yield lo + whole, hi, hi - lo - whole

    def encode(self, u, wire):
        bits, means = self._parts(wire, u.size)
        ok, scratch = True, _Scratch(self.step)
        with np.errstate(over="ignore", invalid="ignore"):
            for lo, hi in _blocks(u.size, self.step):
                ok = ok and bool(np.isfinite(u[lo:hi]).all())
                positive = u[lo:hi] >= 0
                bits[lo // 8:(hi + 7) // 8] = np.packbits(positive, bitorder="little")
                for a, b, width in self._rows(lo, hi):
                    rows = u[a:b].reshape(-1, width)
                    up = positive[a - lo:b - lo].reshape(-1, width)
                    m = means[a // self.block:a // self.block + rows.shape[0]]
                    ones = np.count_nonzero(up, axis=1)
                    m[:, 0] = np.maximum(rows, 0).sum(axis=1) / np.maximum(ones, 1)
                    m[:, 1] = np.minimum(rows, 0).sum(axis=1) / np.maximum(width - ones, 1)
                    rows -= _select(up, m, scratch.rows(rows.shape))
        return ok and bool(np.isfinite(means).all())

    def decode(self, wire, out, add=False):
        bits, means = self._parts(wire, out.size)
        scratch = _Scratch(self.step)
        for lo, hi in _blocks(out.size, self.step):
            up = np.unpackbits(bits[lo // 8:(hi + 7) // 8], count=hi - lo,
                               bitorder="little").view(bool)
            for a, b, width in self._rows(lo, hi):
                m = means[a // self.block:a // self.block + (b - a + width - 1) // width]
                rows = out[a:b].reshape(-1, width)
                if add:
                    rows += _select(up[a - lo:b - lo].reshape(-1, width), m,
                                    scratch.rows(rows.shape))
                else:
                    _select(up[a - lo:b - lo].reshape(-1, width), m, scratch.rows(rows.shape))
                    np.copyto(rows, scratch.rows(rows.shape), casting="safe")


class _Scratch:
    """A float32 block to decode one pass into, cut to each rows shape."""

    def __init__(self, size):
        self.data = np.empty(size, np.float32)

    def rows(self, shape):
        return self.data[:shape[0] * shape[1]].reshape(shape)


def _select(up, means, out):
    """out <- the 1-bits' mean where up, the 0-bits' elsewhere: as
    up * high + (not up) * low, exact (one term is 0) and, on NumPy, some
    times faster than np.where with broadcast means."""
    np.multiply(up, means[:, :1], out=out)
    out += np.multiply(~up, means[:, 1:])
    return out


QUANTIZERS = {"fp16": lambda block: Fp16(), "bf16": lambda block: Bf16(), "1bit": OneBit}


def quantizer(kind, block=512):
    """The quantizer called `kind` (fp16 | bf16 | 1bit)."""
    return QUANTIZERS[kind](block)
