"""bmuf: blockwise model-update filtering (Chen & Huo, ICASSP 2016).

    G   = sum_k (n_k / n) * (w_k - s)        mean block delta
    D  <- eta * D + zeta * G                 block momentum
    w_g <- w_g + D
    w_k <- s' = w_g + eta * D  (nesterov)  or  w_g
At the end every rank keeps w_g itself, without the look-ahead, so a
round after it starts from s = w_g: D keeps its momentum across rounds.

s is where the block started: w_g, or under Nesterov the look-ahead
w_g + eta * D that the workers were handed (the paper's W_g(t-1)).
Measuring the delta from w_g instead would count eta * D twice, and the
defaults (eta = 1 - 1/N, zeta = 1) would then diverge: D grows as
eta * (1 + zeta) > 1. Without Nesterov both readings coincide.

Compressed with compression_momentum = local, rank k keeps its share D_k
of the block momentum and the sync sums the shares (docs/algorithms.md,
"Momentum shares"):
    D_k <- eta * D_k + zeta * (n_k / n) * (w_k - s)
    D   <- sum_k D_k  (compressed)
    w_g <- w_g + D;   w_k <- w_g + eta * D  (nesterov)  or  w_g
Uncompressed these are the filter above (sum_k D_k = D); compressed, the
rounding error reaches w_g once instead of through the filter's gain.
"""
import numpy as np

from .. import kernels
from ..buffers import host_copy
from . import compressed
from .base import CollectiveWorker, register
from .option import Option, positive


def _momentum_range(eta):
    return None if 0.0 <= eta < 1.0 else "must satisfy 0 <= block_momentum < 1"


@register
class Bmuf(compressed.MomentumShares, CollectiveWorker):
    name = "bmuf"
    OPTIONS = {
        "block_momentum": Option(lambda N: 1.0 - 1.0 / N, _momentum_range,
                                 help="eta (default 1-1/N; the trainer's: min(1-1/N, 0.5))"),
        "block_lr": Option(1.0, positive, help="zeta (default 1)"),
        "nesterov": Option(True, kind=bool,
                           help="hand the workers the look-ahead w_g + eta*D (default on)"),
        "reset_local_state": Option(True, kind=bool,
                                    help="clear the local optimizer state after each sync "
                                         "(default on; the trainer's: off)"),
        **compressed.OPTIONS,
        **compressed.MOMENTUM,
    }
    GLOBAL_STATE = ("global_model", "block_momentum", "block_start")
    WORKER_STATE = OPTIONAL_STATE = ("momentum_share",)

    @property
    def clears_local_state(self):
        return self.reset_local_state

    def initialized(self):
        self.global_model = self.buffer.like()           # w_g
        self.block_momentum_buffer = self.buffer.like()  # D
        self.share = self.buffer.like() if self.shares_momentum else None   # D_k
        self.restart()

    def restart(self):
        self.global_model.data[...] = self.buffer.data   # w_g = s = the model
        self.block_momentum_buffer.data.fill(0)          # D = 0
        self.start = 0.0                                 # s = w_g + start * D
        if self.share is not None:
            self.share.data.fill(0)

    def update(self, n_k, n, active):
        self.keep_share(n_k, n, active)
        # w = sum_k (n_k/n) w_k, so G = w - s; the filter runs on each part
        # of w as its sum arrives
        self.average(n_k, n, active, then=self._filter)
        self.start = self.block_momentum if self.nesterov else 0.0   # the look-ahead

    def _filter(self, lo, hi):
        kernels.bmuf_update(self.buffer.data[lo:hi], self.global_model.data[lo:hi],
                            self.block_momentum_buffer.data[lo:hi],
                            self.block_momentum, self.block_lr, self.nesterov, self.start)

    def _compressed_average(self, weight, then):
        w, w_g, D = self.buffer.data, self.global_model.data, self.block_momentum_buffer.data
        e, look = self.compressed.residual, self.block_momentum if self.nesterov else None
        if self.shares_momentum:
            # D_k and its step into e_k, then w_g and w from D = sum_k D_k,
            # piece by piece (every piece's share reads D before any is summed)
            share = self.share.data

            def feed(lo, hi):
                kernels.bmuf_share(e[lo:hi], share[lo:hi], w[lo:hi], w_g[lo:hi], D[lo:hi],
                                   self.start, weight, self.block_momentum, self.block_lr)

            def apply(lo, hi):
                kernels.bmuf_apply(w[lo:hi], w_g[lo:hi], D[lo:hi], look)
            self.compressed.sum(D, self.syncs, before=feed, after=apply)
            return
        # e_k += c_k in one pass, then the filter on G itself (the contract's
        # D <- eta D + zeta G) in one: s is never stored, nor G rounded to s +
        # G; each piece by piece, beside the quantizer's pass over it

        def contribute(lo, hi):
            kernels.bmuf_contribution(e[lo:hi], w[lo:hi], w_g[lo:hi], D[lo:hi], self.start,
                                      weight)

        def filter_g(lo, hi):
            kernels.bmuf_update_delta(w[lo:hi], w_g[lo:hi], D[lo:hi], self.block_momentum,
                                      self.block_lr, look)
        self.compressed.sum(w, self.syncs, before=contribute, after=filter_g)

    def _share_step(self, weight):
        """D_k <- eta D_k + zeta c_k; returns D_k."""
        share = self.share.data
        share *= share.dtype.type(self.block_momentum)
        kernels.axpy(share, self.block_lr, self.contribution(weight))
        return share

    def start_point(self):
        """s = w_g + start * D, made in the compression's scratch."""
        s = self.compressed.scratch
        s[...] = self.global_model.data
        kernels.axpy(s, self.start, self.block_momentum_buffer.data)
        return s

    def finish(self):
        self.buffer.data[...] = self.global_model.data
        self.start = 0.0

    def state_dict(self):
        state = {"global_model": host_copy(self.global_model.data),
                 "block_momentum": host_copy(self.block_momentum_buffer.data),
                 "block_start": np.asarray(self.start), **self.compression_state()}
        if self.share is not None:
            state["momentum_share"] = host_copy(self.share.data)
        return state

    def load_state_dict(self, state):
        # a checkpoint from before the start was kept: the trainer's are all
        # taken at a round's end, on w_g
        super().load_state_dict(dict({"block_start": np.asarray(0.0)}, **state))

    def _load_state(self, state):
        super()._load_state(state)
        self.global_model.data[...] = self.buffer.xp.asarray(state["global_model"])
        self.block_momentum_buffer.data[...] = self.buffer.xp.asarray(state["block_momentum"])
        self.start = float(state["block_start"])
        if self.share is not None:      # absent (a checkpoint under global): D's equal shares
            self.share.data[...] = self.buffer.xp.asarray(state["momentum_share"]) \
                if "momentum_share" in state else self.block_momentum_buffer.data / self.N

