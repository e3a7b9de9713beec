"""Compression on the wire for the collective algorithms (docs/algorithms.md,
"Compression on the wire"): their options, and the sum of contributions
c_k through psgd/compression's striped, error-fed exchange.

    bsp, bmuf, sod:  c_k = (n_k / n) * (w_k - s)    s: the block's start point
    syncgrad:        c_k = b_k * g_k, divided by b = sum_k b_k afterwards
syncgrad's count cannot ride in 1-bit data, so it rides beside it, exact,
in the header of every message of the striped sum (psgd/compression/
stripes.py): still one exchange per sync and no other collective.
"""
import numpy as np

from .. import kernels
from ..compression import KINDS, StripedSum, quantizer
from ..compression.feedback import joined_state, load_joined
from ..errors import UsageError
from . import two_level
from .option import Option, positive


def _non_negative(v):
    return None if v >= 0 else "must be >= 0"


OPTIONS = {"compression": Option("none", kind=KINDS,
                                 help="quantize each sync's sum (asgd/masgd: the push), with "
                                      "error feedback (default none)"),
           "compression_block": Option(512, positive, kind=int,
                                       help="1bit: elements per block sharing two "
                                            "reconstruction values (default 512)"),
           "compression_start": Option(0, _non_negative, kind=int,
                                       help="the first K syncs go uncompressed (a warm-up; "
                                            "default 0)")}

RANGES = {"fp16": "fp16's range (|x| <= 65504)", "bf16": "bf16's range (float32's)",
          "1bit": "float32's range"}


def buffer_problem(options, buffer):
    """Why `buffer` cannot be compressed under `options`, or None."""
    if options.get("compression", "none") != "none" and buffer.on_device:
        return ("compression=%s: compressed sums of device (CuPy) buffers are not built yet; "
                "use compression=none on a GPU" % options["compression"])
    return None


class Compression:
    """One collective worker's compressed sums of its flat buffer: the
    striped exchange (in two levels across hosts: two_level.py), its
    residuals, and a scratch for the start point (each allocated once).
    split() cuts it into independent sums of consecutive ranges (psgd.torch's
    buckets), each with its own stripes and residuals."""

    def __init__(self, comm, size, dtype, kind, block, start):
        self.kind, self.start = kind, start
        self._comm, self._dtype, self._q = comm, dtype, quantizer(kind, block)
        self.striped = two_level.make(comm, size, dtype, self._q) or \
            StripedSum(comm, size, dtype, self._q)
        self.parts = {0: self.striped}     # the sums, by their range's first element
        self._scratch = None

    def split(self, ranges):
        """Sum each of `ranges` ((lo, hi), consecutive, covering the buffer)
        on its own from now on: its stripes and 1-bit blocks start at lo,
        its residuals start at 0 (the whole buffer's, never written yet,
        are left to the allocator's untouched pages)."""
        self.parts = {lo: self._sum_of(hi - lo) for lo, hi in ranges}

    def _sum_of(self, size):
        if isinstance(self.striped, two_level.TwoLevelSum):     # the same host split
            return two_level.TwoLevelSum(self.striped.levels, size, self._dtype, self._q)
        return StripedSum(self._comm, size, self._dtype, self._q)

    @property
    def scratch(self):
        """A model-sized array for the start point s, allocated at its first
        use (syncgrad never needs one)."""
        if self._scratch is None:
            self._scratch = np.zeros_like(self.residual)
        return self._scratch

    @property
    def residual(self):
        """e_k of the whole buffer (not split): add c_k to it, then sum()."""
        return self.striped.feedback.worker

    def residual_at(self, lo):
        """e_k of the part starting at element lo."""
        return self.parts[lo].feedback.worker

    def applies(self, sync):
        """Whether sync number `sync` (from 0) is compressed."""
        return sync >= self.start

    def sum(self, out, sync, count=0, bad=0, at=0, wait=None):
        """out <- G of the part starting at element `at` (the whole buffer
        unless split); (sum of count, sum of bad) exactly. An overflow on any
        rank is a UsageError on every rank, naming the sync (from 1).
        `wait`: StripedSum.sum's."""
        count, bad, overflow = self.parts[at].sum(out, count, bad, wait)
        if overflow:
            raise UsageError(
                "compression=%s: sync %d has a value beyond %s, an inf or a NaN (the model "
                "diverged, or the format is too narrow: try bf16, or a smaller learning rate)"
                % (self.kind, sync + 1, RANGES[self.kind]))
        return count, bad

    def add_delta(self, w, s, weight):
        """e_k += weight * (w - s), block by block."""
        t = w.dtype.type(weight)

        def add(e, w, s):
            d = np.subtract(w, s)
            d *= t
            e += d
        kernels.blockwise(add, self.residual, w, s)

    def _feedbacks(self):
        return [self.parts[lo].feedback for lo in sorted(self.parts)]

    def zero(self):
        for feedback in self._feedbacks():
            feedback.zero()

    def state_dict(self):
        """The residuals under one sum's keys, split or not (e_k in the
        buffer's layout)."""
        return joined_state(self._feedbacks())

    def load_state_dict(self, state):
        load_joined(self._feedbacks(), state)

    def close(self):
        """Collective: frees the host split of a two-level sum (its parts share it)."""
        if isinstance(self.striped, two_level.TwoLevelSum):
            self.striped.close()


class Push:
    """A server algorithm worker's compressed push (asgd, masgd): u = delta
    + e_k, one message of Q(u) per server shard (a shard plays a stripe's
    part: its blocks start at its first element), e_k <- u - D(Q(u)). The
    server applies D(q) (ShardDecoder) and replies with the model as it is."""

    def __init__(self, shards, dtype, kind, block, start):
        self.kind, self.start, self.shards = kind, start, shards
        self.q = quantizer(kind, block)
        self.residual = np.zeros(shards[-1][1] if shards else 0, dtype)     # e_k
        self.wires = [np.zeros(self.q.nbytes(hi - lo), np.uint8) for lo, hi in shards]

    def applies(self, sync):
        return sync >= self.start

    def encode(self, delta, sync, rank):
        """The messages of this push; an overflow is a UsageError on this
        worker before anything is sent (as a bad count is)."""
        self.residual += delta
        ok = True
        for (lo, hi), wire in zip(self.shards, self.wires):
            ok = self.q.encode(self.residual[lo:hi], wire) and ok
        if not ok:
            raise UsageError("compression=%s: worker %d's push at its sync %d has a value "
                             "beyond %s, an inf or a NaN (the model diverged, or the format is "
                             "too narrow: try bf16, or a smaller learning rate)" % (
                                 self.kind, rank, sync + 1, RANGES[self.kind]))
        return self.wires


class ShardDecoder:
    """The server's side of compressed pushes to its shard of `size`
    elements: each worker's syncs counted, so the server knows which of
    them are past compression_start, as the worker does."""

    def __init__(self, size, kind, block, start):
        self.q, self.start = quantizer(kind, block), start
        self.wire = np.zeros(self.q.nbytes(size), np.uint8)
        self.pushes = {}

    def compressed(self, rank):
        """Whether worker `rank`'s push now being served is compressed."""
        count = self.pushes.get(rank, 0)
        self.pushes[rank] = count + 1
        return count >= self.start


def make_push(shards, dtype, options):
    if options.get("compression", "none") == "none":
        return None
    return Push(shards, dtype, options["compression"], options["compression_block"],
                options["compression_start"])


def make_decoder(size, options):
    if options.get("compression", "none") == "none":
        return None
    return ShardDecoder(size, options["compression"], options["compression_block"],
                        options["compression_start"])


def make(comm, size, dtype, options):
    """The Compression of a buffer of `size` elements under `options`, or
    None (compression=none)."""
    if options.get("compression", "none") == "none":
        return None
    return Compression(comm, size, dtype, options["compression"],
                       options["compression_block"], options["compression_start"])


class Compressing:
    """The compressed sums' part of a collective worker (a mixin before
    Algorithm): built from the options, zeroed by reset_to, its residuals in
    the state, freed at close."""

    compression = "none"        # OPTIONS above, where a subclass declares them

    def __init__(self, comm, buffer, *args, **kwargs):
        super().__init__(comm, buffer, *args, **kwargs)
        self.compressed = make(comm, self.compressed_size(), buffer.dtype,
                               self.options)

    def compressed_size(self):
        """Elements of the sums that are compressed (syncgrad's: the gradients)."""
        return self.buffer.size

    def compressing(self):
        """Whether this sync's sum is compressed (compression_start syncs are not)."""
        return self.compressed is not None and self.compressed.applies(self.syncs)

    def reset_to(self, params=None):
        super().reset_to(params)
        if self.compressed is not None:
            self.compressed.zero()

    def close(self):
        if self.compressed is not None and self.comm is not None:
            self.compressed.close()
        super().close()

    def compression_state(self):
        """The residuals, for a subclass's state_dict."""
        return {} if self.compressed is None else self.compressed.state_dict()

    def _load_state(self, state):
        if self.compressed is not None:
            self.compressed.load_state_dict(state)

