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
from . import compiled, half_cast
from .one_bit import OneBit
from .scratch import Scratch

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

    def __init__(self):
        self.scratch = Scratch(BLOCK)

    def _arrays(self, n, names, dtype=np.uint32):
        return [self.scratch.get(name, min(n, BLOCK), dtype) for name in names]

    def nbytes(self, n):
        return 2 * n

    align = 1       # a range of a stripe may start anywhere

    def encode(self, u, wire, lo=0, hi=None):
        """Q(u[lo:hi]) into its place in the wire of all of u, u[lo:hi] <-
        u - D(Q(u)); False when a value overflowed. Compiled or not as all
        of u would be."""
        hi = u.size if hi is None else hi
        return self._encode(u[lo:hi], wire[2 * lo:2 * hi], u.size)

    def decode(self, wire, out, add=False, lo=0, hi=None):
        """D of elements [lo, hi) of the wire of all of out into out[lo:hi]."""
        hi = out.size if hi is None else hi
        self._decode(wire[2 * lo:2 * hi], out[lo:hi], add, out.size)


class Fp16(_TwoBytes):
    """IEEE half precision, rounded to nearest even. The NumPy passes work
    on the float32 bits with integers: NumPy's own float16 cast takes a
    slow path for values below fp16's normal range, where error-fed
    gradients live (30-45x slower there than here). Compiled, the CPU's
    conversion instructions do it where it has them (half_cast.py)."""
    name = "fp16"

    def _encode(self, u, wire, whole):
        half, ok = wire[:2 * u.size].view(np.uint16), True
        if half_cast.LOOPS.ready(whole):
            return half_cast.fp16_encode(u, half)
        if compiled.LOOPS.ready(whole):
            return compiled.fp16_encode(u, half, BLOCK // 8)
        (f32,), (where,) = self._arrays(u.size, "f", np.float32), self._arrays(u.size, "w", bool)
        a, b, c, d = self._arrays(u.size, "abcd")
        with np.errstate(over="ignore", invalid="ignore"):
            for lo, hi in _blocks(u.size):
                k = hi - lo
                x = _as_float32(u[lo:hi], f32)
                bits = _to_half_bits(x.view(np.uint32), a[:k], b[:k], c[:k], d[:k], where[:k])
                # all exponent bits set: an inf or a NaN
                ok = ok and not ((bits & 0x7C00) == 0x7C00).any()
                np.copyto(half[lo:hi], bits, casting="unsafe")
                u[lo:hi] -= _from_half_bits(bits, b[:k], c[:k], d[:k], where[:k]).view(np.float32)
        return ok

    def _decode(self, wire, out, add, whole):
        half = wire[:2 * out.size].view(np.uint16)
        if half_cast.LOOPS.ready(whole):
            return half_cast.fp16_decode(half, out, add)
        if compiled.LOOPS.ready(whole):
            return compiled.fp16_decode(half, out, add)
        a, b, c, d = self._arrays(out.size, "abcd")
        (where,) = self._arrays(out.size, "w", bool)
        for lo, hi in _blocks(out.size):
            k = hi - lo
            np.copyto(a[:k], half[lo:hi], casting="safe")
            value = _from_half_bits(a[:k], b[:k], c[:k], d[:k], where[:k]).view(np.float32)
            if add:
                out[lo:hi] += value
            else:
                np.copyto(out[lo:hi], value, casting="safe")


# float32 <-> float16 on the bits (F. Giesen's branch-free method, as masks)
_ABS32 = np.uint32(0x7FFFFFFF)
_REBIAS = np.uint32((((15 - 127) << 23) + 0xFFF) & 0xFFFFFFFF)    # exponent and half an ulp
_DENORM = np.uint32(((127 - 15) + (23 - 10) + 1) << 23)   # adding 2^-1 aligns fp16's subnormals
_HALF_NORMAL_MIN = np.uint32(113 << 23)                  # 2^-14 as float32 bits
_HALF_OVERFLOW = np.uint32((127 + 16) << 23)             # 2^16: inf once rounded
_INF32 = np.uint32(0x7F800000)
_EXPONENT16 = np.uint32(0x7C00 << 13)                    # fp16's exponent, shifted to float32's


def _blend(out, where, make, alt, words):
    """out <- make's values where `where` (bool), out elsewhere; make(dst,
    where) writes them into dst (ufuncs' where=). Subnormal halves sit among
    normal ones wherever error-fed values live, and on such a mixed mask
    np.where and where= run 25-35x a pass (an inner-loop call per run of
    equal mask values): there make fills all of `alt` and bit masks choose
    (alt and words are scratch); a few elements keep where=."""
    count = np.count_nonzero(where)
    if count * 64 <= where.size:
        if count:
            make(out, where)
        return
    make(alt, True)
    np.negative(where.view(np.int8), out=words.view(np.int32), casting="unsafe")
    alt ^= out
    alt &= words
    out ^= alt


def _to_half_bits(bits, out, f, t, m, where):
    """The fp16 bits of float32 `bits` into `out` (uint32), rounded to
    nearest even; f, t, m and `where` (bool) are scratch of the same size."""
    np.bitwise_and(bits, _ABS32, out=f)
    np.right_shift(f, 13, out=out)        # the lowest kept mantissa bit: ties to even
    out &= 1
    out += _REBIAS
    out += f
    out >>= 13

    def subnormal(dst, where):
        np.add(f.view(np.float32), _DENORM.view(np.float32), out=dst.view(np.float32),
               where=where)
        np.subtract(dst, _DENORM, out=dst, where=where)
    _blend(out, np.less(f, _HALF_NORMAL_MIN, out=where), subnormal, t, m)
    # inf and NaN: rare, so where= meets long runs and stays fast
    np.copyto(out, 0x7C00, where=f >= _HALF_OVERFLOW)
    np.copyto(out, 0x7E00, where=f > _INF32)
    np.right_shift(bits, 16, out=t)
    t &= 0x8000
    out |= t
    return out


def _from_half_bits(h, out, t, v, where):
    """The float32 bits of fp16 bits `h` (uint32) into `out`; t, v and
    `where` (bool) are scratch."""
    np.bitwise_and(h, 0x7FFF, out=out)
    out <<= 13
    np.bitwise_and(out, _EXPONENT16, out=t)
    out += np.uint32((127 - 15) << 23)
    np.add(out, np.uint32((128 - 16) << 23), out=out, where=t == _EXPONENT16)

    def subnormal(dst, where):
        """A subnormal half (exponent 0) is 2^-14 less than the normal float
        with its mantissa: exact, all operands normal."""
        np.add(out, np.uint32(1 << 23), out=dst, where=where)
        np.subtract(dst.view(np.float32), _HALF_NORMAL_MIN.view(np.float32),
                    out=dst.view(np.float32), where=where)
    _blend(out, np.equal(t, 0, out=where), subnormal, v, t)
    np.bitwise_and(h, 0x8000, out=t)
    t <<= 16
    out |= t
    return out


class Bf16(_TwoBytes):
    """The upper 16 bits of the float32 value, rounded to nearest even:
    add 0x7FFF + ((bits >> 16) & 1) to the bits, keep the upper half."""
    name = "bf16"

    def _encode(self, u, wire, whole):
        top, ok = wire[:2 * u.size].view(np.uint16), True
        if compiled.LOOPS.ready(whole):
            return compiled.bf16_encode(u, top)
        (f32,), (r,) = self._arrays(u.size, "f", np.float32), self._arrays(u.size, "r")
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

    def _decode(self, wire, out, add, whole):
        top = wire[:2 * out.size].view(np.uint16)
        if compiled.LOOPS.ready(whole):
            return compiled.bf16_decode(top, out, add)
        (r,) = self._arrays(out.size, "r")
        for lo, hi in _blocks(out.size):
            rs = r[:hi - lo]
            np.copyto(rs, top[lo:hi], casting="safe")
            rs <<= 16
            if add:
                out[lo:hi] += rs.view(np.float32)
            else:
                np.copyto(out[lo:hi], rs.view(np.float32), casting="safe")


QUANTIZERS = {"fp16": lambda block: Fp16(), "bf16": lambda block: Bf16(), "1bit": OneBit}


def quantizer(kind, block=512):
    """The quantizer called `kind` (fp16 | bf16 | 1bit)."""
    return QUANTIZERS[kind](block)
