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

from ..backend import to_numpy
from ..compression import KINDS, StripedSum, quantizer
from ..compression.device import DeviceSum
from ..compression.feedback import joined_state, load_joined
from ..errors import UsageError
from . import two_level
from .option import Option, positive


def _non_negative(v):
    return None if v >= 0 else "must be >= 0"


def _compressed(options):
    if options["compression"] == "none":
        return "applies only with compression (fp16, bf16 or 1bit), and compression is none"
    return None


OPTIONS = {"compression": Option("none", kind=KINDS,
                                 help="quantize each sync's sum (asgd/masgd: the push), with "
                                      "error feedback (default none)"),
           "compression_block": Option(512, positive, kind=int, applies=_compressed,
                                       help="1bit: elements per block sharing two "
                                            "reconstruction values (default 512)"),
           "compression_start": Option(0, _non_negative, kind=int, applies=_compressed,
                                       help="the first K syncs go uncompressed (a warm-up; "
                                            "default 0)")}

# bmuf, sod and syncgrad: where the momentum lives when the sums are
# compressed (docs/algorithms.md, "Momentum shares")
MOMENTUM = {"compression_momentum": Option(
    "global", kind=("global", "local"),
    help="with compression: global (the contract: the sum's rounding passes through the "
         "momentum's gain) or local (each rank keeps its share of the momentum, syncgrad's "
         "its own optimizer, and the sync sums the steps: rounding reaches the model once) "
         "(default global; the trainer's: local)")}


class LocalMomentum:
    """The compression_momentum option (a mixin before the algorithm class):
    refused where it cannot apply, in one line."""

    @classmethod
    def resolve_options(cls, options, size, servers=1):
        resolved = super().resolve_options(options, size, servers)
        if resolved.get("compression_momentum") == "local":
            if resolved["compression"] == "none":
                problem = "applies to compressed sums; compression is none"
            else:
                problem = cls.nonlinear_momentum(resolved)
            if problem:
                raise UsageError("%s: compression_momentum=local %s" % (cls.name, problem))
        return resolved

    @classmethod
    def nonlinear_momentum(cls, options):
        """Why the momentum under `options` cannot be split into shares, or None."""
        return None

    @property
    def shares_momentum(self):
        return self.compression_momentum == "local"


class MomentumShares(LocalMomentum):
    """bmuf's and sod's momentum shares, kept by the algorithm."""

    def keep_share(self, n_k, n, active):
        """Before a plain sync (compression_start): update the share, so the
        shares sum to the momentum when compression starts."""
        if self.shares_momentum and self.share is not None and not self.compressing():
            self._share_step(self.buffer.dtype.type(self._weight(n_k, n, active, False)))

    def _compressed_average(self, weight, then):
        if not self.shares_momentum:
            super()._compressed_average(weight, then)
            return
        self._feed_share(weight)
        self._apply_shared_sum()

    def _feed_share(self, weight):
        """Update this rank's share and add its step to e_k."""
        self.compressed.add(self._share_step(weight))

    def contribution(self, weight):
        """c_k = weight (w - s), in the compression's scratch."""
        c = np.subtract(self.buffer.data, self.start_point(), out=self.compressed.scratch)
        c *= weight
        return c

    def _share_step(self, weight):
        """Update this rank's share; returns what it adds to the sum."""
        raise NotImplementedError

    def _apply_shared_sum(self):
        """Sum the shares' steps (compressed) and step the model with it."""
        raise NotImplementedError


RANGES = {"fp16": "fp16's range (|x| <= 65504)", "bf16": "bf16's range (float32's)",
          "1bit": "float32's range"}


class Compression:
    """One collective worker's compressed sums of its flat buffer: the
    striped exchange (in two levels across hosts: two_level.py), its
    residuals, and a scratch for a contribution or a start point the
    algorithm does not keep (each allocated once).
    split() cuts it into independent sums of consecutive ranges (psgd.torch's
    buckets), each with its own stripes and residuals."""

    def __init__(self, comm, size, dtype, kind, block, start, xp=np):
        self.kind, self.start = kind, start
        self._comm, self._dtype, self._q, self._xp = comm, dtype, quantizer(kind, block), xp
        self.striped = self._on_device(two_level.make(comm, size, dtype, self._q) or
                                       StripedSum(comm, size, dtype, self._q))
        self.parts = {0: self.striped}     # the sums, by their range's first element
        self._scratch = None

    def _on_device(self, host_sum):
        """A device buffer's sums are staged through the host (device.py)."""
        return host_sum if self._xp is np else DeviceSum(host_sum, self._xp)

    def _host_sum(self, part):
        return part.inner if isinstance(part, DeviceSum) else part

    def split(self, ranges):
        """Sum each of `ranges` ((lo, hi), consecutive, covering the buffer)
        on its own from now on: its stripes and 1-bit blocks start at lo,
        its residuals start at 0 (the whole buffer's, never written yet,
        are left to the allocator's untouched pages)."""
        self.parts = {lo: self._sum_of(hi - lo) for lo, hi in ranges}

    def _sum_of(self, size):
        whole = self._host_sum(self.striped)
        if isinstance(whole, two_level.OverHosts):     # the same host split
            part = whole.like(size, self._dtype, self._q)
        else:
            part = StripedSum(self._comm, size, self._dtype, self._q)
        return self._on_device(part)

    @property
    def scratch(self):
        """A model-sized array for a contribution c_k or bmuf's start point,
        allocated at its first use: the momentum shares' (compression_momentum
        = local); bsp, syncgrad and the global momentum need none."""
        if self._scratch is None:
            self._scratch = self._xp.zeros_like(self.residual)
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

    def sum(self, out, sync, count=0, bad=0, at=0, wait=None, before=None, after=None):
        """out <- G of the part starting at element `at` (the whole buffer
        unless split); (sum of count, sum of bad) exactly. An overflow on any
        rank is a UsageError on every rank, naming the sync (from 1).
        `wait`: StripedSum.sum's. before(lo, hi) adds c_k to e_k[lo:hi] and
        after(lo, hi) updates out[lo:hi] once G is there: piece by piece
        where the sum is the flat striped one (each piece in cache for the
        quantizer's pass and the algorithm's), else all at once."""
        part = self.parts[at]
        if isinstance(part, StripedSum):
            count, bad, overflow = part.sum(out, count, bad, wait, before, after)
        else:
            if before is not None:
                before(0, out.size)
            count, bad, overflow = part.sum(out, count, bad, wait)
            if after is not None and not overflow:
                after(0, out.size)
        if overflow:
            raise UsageError(
                "compression=%s: sync %d has a value beyond %s, an inf or a NaN (the model "
                "diverged, or the format is too narrow: try bf16, or a smaller learning rate)"
                % (self.kind, sync + 1, RANGES[self.kind]))
        return count, bad

    def add(self, x):
        """e_k += x (a momentum share's step, compression_momentum=local)."""
        e = self.residual
        e += x

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
        whole = self._host_sum(self.striped)
        if isinstance(whole, two_level.OverHosts):
            whole.close()


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
        self.residual += to_numpy(delta)      # a device's delta: copied once its stream is done
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


def make(comm, size, dtype, options, xp=np):
    """The Compression of a buffer of `size` elements under `options` (a
    device buffer's if `xp` is CuPy), or None (compression=none)."""
    if options.get("compression", "none") == "none":
        return None
    return Compression(comm, size, dtype, options["compression"],
                       options["compression_block"], options["compression_start"], xp)


class Compressing:
    """The compressed sums' part of a collective worker (a mixin before
    Algorithm): built from the options, zeroed by reset_to, its residuals in
    the state, freed at close."""

    compression = "none"        # OPTIONS above, where a subclass declares them

    def __init__(self, comm, buffer, *args, **kwargs):
        super().__init__(comm, buffer, *args, **kwargs)
        self.compressed = make(comm, self.compressed_size(), buffer.dtype,
                               self.options, buffer.xp)

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

