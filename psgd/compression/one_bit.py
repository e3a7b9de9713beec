"""1-bit SGD's quantizer: a sign bit per element, two means per block.

Blocked passes as psgd/kernels.py's updates, on the floats' bits: the
class masks are words of all zeros or all ones, so splitting a block into its
non-negative and negative parts and picking each element's mean are bitwise
ands and xors. NumPy's alternatives each cost a multiple of that pass:
np.maximum / np.minimum (NaN handling), bool * float (a cast per element),
np.where and ufuncs with where= on a random mask (runs of a few elements:
an inner-loop call per run). The finiteness check is folded into the
means: an inf or NaN input makes its block's sum, so its mean, non-finite.
"""
import numpy as np

from ..kernels import BLOCK
from . import one_bit_loops
from .scratch import Scratch

# NumPy 2's popcount; setup.py allows NumPy 1.22, which counts the bools
_bitwise_count = getattr(np, "bitwise_count", None)

# Elements per pass: a pass makes ~20 NumPy calls, and passes a quarter as
# long lost more to their cost than they won by staying in L2.
STEP = BLOCK


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
        self.step = self.block * 8 * max(1, STEP // (8 * self.block))
        self.scratch = Scratch(self.step)

    def _bits_bytes(self, n):
        return (n + 7) // 8 + (-((n + 7) // 8)) % 4

    def nbytes(self, n):
        return self._bits_bytes(n) + 8 * (-(-n // self.block))

    def _parts(self, wire, n):
        nb = self._bits_bytes(n)
        return wire[:nb], wire[nb:self.nbytes(n)].view(np.float32).reshape(-1, 2)

    def _rows(self, lo, hi):
        """(start, end, width) of [lo, hi)'s whole blocks, then the short one."""
        B = self.block
        whole = (hi - lo) // B * B
        if whole:
            yield lo, lo + whole, B
        if lo + whole < hi:
            yield lo + whole, hi, hi - lo - whole

    @property
    def align(self):
        """Where a range of a stripe may start: whole blocks, whole bytes of bits."""
        return np.lcm(self.block, 8)

    def _range(self, wire, n, lo, hi):
        """The bits and means of elements [lo, hi) of the wire of n elements."""
        bits, means = self._parts(wire, n)
        return bits[lo // 8:(hi + 7) // 8], means[lo // self.block:-(-hi // self.block)]

    def encode(self, u, wire, lo=0, hi=None):
        """Q(u[lo:hi]) into its place in the wire of all of u (lo on
        `align`), u[lo:hi] <- u - D(Q(u)); False when a value is not finite.
        Compiled or not as all of u would be."""
        hi = u.size if hi is None else hi
        compiled = one_bit_loops.LOOPS.ready(u.size)
        bits, means = self._range(wire, u.size, lo, hi)
        u = u[lo:hi]
        if compiled:
            one_bit_loops.one_bit_encode(u, bits, means, self.block, self.step)
            return bool(np.isfinite(means).all())
        s = _Scratch(self.scratch, min(u.size, self.step), u.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            for lo in range(0, u.size, self.step):
                hi = min(lo + self.step, u.size)
                up, mask = s.up[:hi - lo], s.mask[:hi - lo]
                np.greater_equal(u[lo:hi], 0, out=up)
                packed = bits[lo // 8:(hi + 7) // 8]
                packed[...] = np.packbits(up, bitorder="little")
                np.negative(up.view(np.int8), out=mask, casting="unsafe")
                for a, b, width in self._rows(lo, hi):
                    m = means[a // self.block:(b - 1) // self.block + 1]
                    rows = u[a:b].view(s.word).reshape(-1, width)
                    shape = rows.shape
                    words = mask[a - lo:b - lo].reshape(shape)
                    parts = s.parts[:, :b - a].reshape((2,) + shape)
                    np.bitwise_and(rows, words, out=parts[0])       # the non-negative u
                    np.bitwise_xor(rows, parts[0], out=parts[1])    # the rest
                    ones = self._ones(packed, up, a - lo, b - lo, width)
                    counts = np.stack([np.maximum(ones, 1), np.maximum(width - ones, 1)], 1)
                    np.divide(parts.view(u.dtype).sum(axis=2).T, counts, out=m,
                              casting="unsafe")
                    pick = s.pick(words, m, parts[0])
                    flat = rows.view(u.dtype)
                    np.subtract(flat, pick.view(u.dtype), out=flat)
        return bool(np.isfinite(means).all())

    def _ones(self, packed, up, a, b, width):
        """The 1-bits per row of [a, b) (offsets in the pass): counted on the
        packed bytes when rows are whole bytes (an eighth of the reads)."""
        if width % 8 == 0 and _bitwise_count is not None:
            row_bytes = packed[a // 8:b // 8].reshape(-1, width // 8)
            if width % 64 == 0:
                row_bytes = row_bytes.view(np.uint64)
            return _bitwise_count(row_bytes).sum(axis=1, dtype=np.int64)
        return up[a:b].reshape(-1, width).view(np.uint8).sum(axis=1, dtype=np.int64)

    def decode(self, wire, out, add=False, lo=0, hi=None):
        """D of elements [lo, hi) of the wire of all of out into out[lo:hi]."""
        hi = out.size if hi is None else hi
        compiled = one_bit_loops.LOOPS.ready(out.size)
        bits, means = self._range(wire, out.size, lo, hi)
        out = out[lo:hi]
        if compiled:
            one_bit_loops.one_bit_decode(bits, means, out, add, self.block)
            return
        s = _Scratch(self.scratch, min(out.size, self.step), out.dtype)
        for lo in range(0, out.size, self.step):
            hi = min(lo + self.step, out.size)
            mask = s.mask[:hi - lo]
            np.negative(np.unpackbits(bits[lo // 8:(hi + 7) // 8], count=hi - lo,
                                      bitorder="little").view(np.int8),
                        out=mask, casting="unsafe")
            for a, b, width in self._rows(lo, hi):
                m = means[a // self.block:(b - 1) // self.block + 1]
                rows = out[a:b].reshape(-1, width)
                pick = s.pick(mask[a - lo:b - lo].reshape(rows.shape), m,
                              s.parts[0, :b - a].reshape(rows.shape)).view(out.dtype)
                if add:
                    rows += pick
                else:
                    np.copyto(rows, pick)


class _Scratch:
    """One pass's arrays: the bits as bools, the class masks and the two
    classes' parts, in words the size of the buffer's elements (int32 or
    int64)."""

    def __init__(self, scratch, size, dtype):
        self.dtype = np.dtype(dtype)
        self.word = np.int32 if self.dtype.itemsize == 4 else np.int64
        self.up = scratch.get("up", size, bool)
        self.mask = scratch.get("mask", size, self.word)
        self.parts = scratch.get("parts", size, self.word, rows=2)

    def pick(self, words, means, out):
        """out <- each element's mean as words: the 1-bits' where words is
        -1, the 0-bits' where 0, as low ^ ((high ^ low) & words)."""
        m = means.astype(self.dtype).view(self.word)
        np.bitwise_and(words, m[:, :1] ^ m[:, 1:], out=out)
        out ^= m[:, 1:]
        return out
