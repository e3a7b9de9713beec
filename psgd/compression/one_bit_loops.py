"""1bit's encode and decode compiled with Numba, where it is installed: the
encode packs a pass's signs, then per block sums its two classes, counts
its ones off the packed bytes and updates its residual while the block is
in L1; the decode is one pass of stores.

A sign byte is eight lanes compared at once (LLVM's fcmp on a vector of
eight, a movmsk on x86) and a byte of means is eight lanes selected at
once, written as Numba intrinsics: LLVM compiled the same loops written
per element badly and differently from machine to machine (on AMD's
Zen 3 a branch per element, which random signs mispredict:
benchmarks/FINDINGS.md, "1bit's passes by the vector"). The intrinsics
are plain LLVM IR, so they compile on every CPU Numba does.

The same bits and residuals as the NumPy passes (one_bit.py); the block
means are summed here in vector lanes, there pairwise, so a mean may
differ in its last bits (every rank still decodes the same bytes:
tests/unit/compression/test_compiled.py). Single-threaded: the ranks own
the cores. Used for stripes of at least jit.MIN_SIZE elements."""
import numpy as np

from .. import jit

LANES = 8     # elements per sign byte


def _define_intrinsics(numba):
    """_sign_byte(v, i): bit t set where v[i + t] >= 0 (an IEEE compare:
    -0.0 sets it, NaN does not, as NumPy's >=); _put_byte(v, i, byte,
    high, low, add): v[i + t] <- (or +=) high where bit t is set, else low;
    _ones(x): x's set bits."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    floats = (types.float32, types.float64)

    def lanes(context, builder, aryty, ary, index):
        """A pointer to the eight elements from ary[index], and their vector type."""
        a = context.make_array(aryty)(context, builder, ary)
        vec = ir.VectorType(context.get_value_type(aryty.dtype), LANES)
        ptr = cgutils.get_item_pointer(context, builder, aryty, a, [index])
        return builder.bitcast(ptr, vec.as_pointer()), vec, aryty.dtype.bitwidth // 8

    @intrinsic
    def sign_byte(typingctx, v, i):
        if not (isinstance(v, types.Array) and v.layout == "C" and v.dtype in floats):
            return None

        def codegen(context, builder, sig, args):
            ptr, vec, align = lanes(context, builder, sig.args[0], args[0], args[1])
            up = builder.fcmp_ordered(">=", builder.load(ptr, align=align),
                                      ir.Constant(vec, [0.0] * LANES))
            return builder.bitcast(up, ir.IntType(LANES))
        return types.uint8(v, types.intp), codegen

    @intrinsic
    def put_byte(typingctx, v, i, byte, high, low, add):
        if not (isinstance(v, types.Array) and v.layout == "C" and v.dtype in floats):
            return None

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ptr, vec, align = lanes(context, builder, aryty, args[0], args[1])

            def splat(value, ty):
                value = context.cast(builder, value, ty, aryty.dtype)
                out = ir.Constant(vec, ir.Undefined)
                for t in range(LANES):
                    out = builder.insert_element(out, value, ir.Constant(ir.IntType(32), t))
                return out

            bit = builder.bitcast(args[2], ir.VectorType(ir.IntType(1), LANES))
            m = builder.select(bit, splat(args[3], sig.args[3]), splat(args[4], sig.args[4]))
            with builder.if_else(args[5]) as (then, otherwise):
                with then:
                    builder.store(builder.fadd(builder.load(ptr, align=align), m), ptr,
                                  align=align)
                with otherwise:
                    builder.store(m, ptr, align=align)
            return context.get_dummy_value()
        return types.none(v, types.intp, types.uint8, high, low, types.boolean), codegen

    @intrinsic
    def ones(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.zext(builder.ctpop(args[0]), ir.IntType(64))
        return types.int64(x), codegen

    globals().update(_sign_byte=sign_byte, _put_byte=put_byte, _ones=ones)
    return True


def _pack_signs(v, bits):
    """bits <- v >= 0, eight to a byte, first element in the lowest bit."""
    whole = v.size >> 3
    for j in range(whole):
        bits[j] = _sign_byte(v, 8 * j)
    if whole * 8 < v.size:
        byte = 0
        for t in range(v.size - whole * 8):
            byte |= (v[8 * whole + t] >= 0) << t
        bits[whole] = byte


def _byte_ones(bits):
    ones = 0
    for j in range(bits.size):
        ones += _ones(bits[j])
    return ones


def _count_ones(bits, first, last):
    """The set bits among bits first .. last - 1."""
    ones, i = 0, first
    while i < last and i & 7:
        ones += (bits[i >> 3] >> (i & 7)) & 1
        i += 1
    ones += _byte_ones(bits[i >> 3:last >> 3])
    for i in range(max(i, last & ~7), last):
        ones += (bits[i >> 3] >> (i & 7)) & 1
    return ones


def _class_sums(v, zero):
    """(sum of the non-negative, sum of the rest) in v's precision: a NaN
    goes with the rest, so an inf or NaN makes a mean non-finite."""
    up, down = zero, zero
    for i in range(v.size):
        x = v[i]
        up += x if x >= zero else zero
        down += zero if x >= zero else x
    return up, down


def _subtract_means(v, high, low):
    for i in range(v.size):
        x = v[i]
        v[i] = x - (high if x >= 0 else low)


def one_bit_encode(u, bits, means, block, step):
    """bits <- u >= 0 packed; means[k] <- (mean of the non-negative, mean of
    the negative) of block k, as float32; u <- u - D(Q(u))."""
    n, zero = u.size, u[:0].sum()
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        packed = bits[lo >> 3:(hi + 7) >> 3]
        _pack_signs(u[lo:hi], packed)
        for a in range(lo, hi, block):
            b = min(a + block, hi)
            up, down = _class_sums(u[a:b], zero)
            ones = _count_ones(packed, a - lo, b - lo)
            k = a // block
            means[k, 0] = up / max(ones, 1)
            means[k, 1] = down / max(b - a - ones, 1)
            _subtract_means(u[a:b], means[k, 0], means[k, 1])


def _place_means(bits, first, v, high, low, add):
    """v[i] <- (or +=) high where bit first + i is set, else low: a byte at
    a time where the block starts on a byte."""
    start = 0
    if first & 7 == 0:
        start = v.size & ~7
        for j in range(start >> 3):
            _put_byte(v, 8 * j, bits[(first >> 3) + j], high, low, add)
    for i in range(start, v.size):
        j = first + i
        m = high if (bits[j >> 3] >> (j & 7)) & 1 else low
        v[i] = v[i] + m if add else m


def one_bit_decode(bits, means, out, add, block):
    for a in range(0, out.size, block):
        k = a // block
        _place_means(bits, a, out[a:a + block], means[k, 0], means[k, 1], add)


# reassoc lets the block sums vectorize; nnan/ninf would drop the
# finiteness checks (so not fastmath=True)
LOOPS = jit.Loops(globals(), ("_pack_signs", "_byte_ones", "_count_ones", "_class_sums",
                              "_subtract_means", "one_bit_encode", "_place_means",
                              "one_bit_decode"),
                  fastmath={"reassoc", "contract"}, setup=_define_intrinsics)
