"""sod: an outer optimizer on the averaged model difference (reference
SodWorker, DiLoCo-style), stepping the common model w_g.

    g   = sum_k (n_k / n) * (w_g - w_k)      pseudo-gradient
    w_g <- outer_step(w_g, g)                sgd | momentum | nesterov | adam
    w_k <- w_g
Outer steps follow PyTorch's conventions, with state starting at 0.

Compressed with compression_momentum = local (sgd, momentum, nesterov: the
linear outer steps), rank k keeps its share m_k of the velocity (m = -v)
and the sync sums each rank's step (docs/algorithms.md, "Momentum shares"):
    c_k = (n_k / n) * (w_k - w_g);   m_k <- mu * m_k + c_k
    d_k = c_k  (sgd)  |  m_k  (momentum)  |  c_k + mu * m_k  (nesterov)
    w_g <- w_g + lr * sum_k d_k  (compressed)
Uncompressed this is the outer step above; compressed, the rounding error
reaches w_g once instead of through the momentum's gain 1 / (1 - mu).
"""
import math

from .. import kernels
from ..buffers import host_copy
from . import compressed
from .base import CollectiveWorker, register
from .option import Option, positive

OUTER_STEPS = ("sgd", "momentum", "nesterov", "adam")


def _unit_interval(v):
    return None if 0.0 <= v < 1.0 else "must satisfy 0 <= value < 1"


def _outer(*steps):
    """An outer step's own option: where the outer step is another, ignored."""
    def applies(options):
        if options["outer"] in steps:
            return None
        return "applies to outer=%s, and outer is %s" % ("|".join(steps), options["outer"])
    return applies


@register
class Sod(compressed.MomentumShares, CollectiveWorker):
    name = "sod"
    OPTIONS = {
        "outer": Option("nesterov", kind=OUTER_STEPS, help="the outer step (default nesterov)"),
        "outer_lr": Option(0.7, positive,
                           help="outer learning rate (default 0.7; the trainer's with the "
                                "nesterov outer step: 0.7 * min(1, N/4))"),
        "outer_momentum": Option(0.9, _unit_interval, applies=_outer("momentum", "nesterov"),
                                 help="outer momentum of momentum and nesterov (default 0.9)"),
        "beta1": Option(0.9, _unit_interval, flag="outer_beta1", applies=_outer("adam"),
                        help="adam outer step's beta1 (default 0.9)"),
        "beta2": Option(0.999, _unit_interval, flag="outer_beta2", applies=_outer("adam"),
                        help="adam outer step's beta2 (default 0.999)"),
        "eps": Option(1e-8, positive, flag="outer_eps", applies=_outer("adam"),
                      help="adam outer step's epsilon (default 1e-8)"),
        **compressed.OPTIONS,
        **compressed.MOMENTUM,
    }
    GLOBAL_STATE = ("global_model", "steps", "velocity", "second_moment")
    WORKER_STATE = OPTIONAL_STATE = ("momentum_share",)
    beta1: float
    beta2: float

    @classmethod
    def nonlinear_momentum(cls, options):
        if options["outer"] == "adam":
            return "needs a linear outer step (sgd, momentum, nesterov), not adam"
        return None

    def initialized(self):
        self.share = (self.buffer.like() if self.shares_momentum and self.outer != "sgd"
                      else None)     # m_k
        self.global_model = self.buffer.like()
        self.velocity = self.buffer.like() if self.outer != "sgd" else None
        self.second_moment = self.buffer.like() if self.outer == "adam" else None
        self.restart()

    def restart(self):
        self.global_model.data[...] = self.buffer.data
        for state in (self.velocity, self.second_moment, self.share):
            if state is not None:
                state.data.fill(0)
        self.steps = 0          # Adam's bias correction starts over too

    def update(self, n_k, n, active):
        self.steps += 1
        self.keep_share(n_k, n, active)
        self.average(n_k, n, active, then=self._outer_step)

    def _outer_step(self, lo, hi):
        """The outer step on w[lo:hi], once that part of the average arrived."""
        state = [b.data[lo:hi] for b in (self.velocity, self.second_moment) if b is not None]
        # Block by block: all of the step's passes meet a block in cache.
        kernels.blockwise(self._update, self.buffer.data[lo:hi],
                          self.global_model.data[lo:hi], *state)

    def start_point(self):
        return self.global_model.data

    def _apply_shared_sum(self):
        w, w_g = self.buffer.data, self.global_model.data
        self.compressed.sum(w, self.syncs)           # sum_k d_k
        kernels.axpy(w_g, self.outer_lr, w)
        w[...] = w_g

    def _share_step(self, weight):
        """m_k <- mu m_k + c_k; returns d_k (no share under sgd: d_k = c_k)."""
        c = self.contribution(weight)
        if self.outer == "sgd":
            return c
        m, mu = self.share.data, self.outer_momentum
        m *= m.dtype.type(mu)
        m += c
        if self.outer == "momentum":
            return m
        kernels.axpy(c, mu, m)                       # nesterov: c_k + mu m_k
        return c

    def _update(self, w, w_g, *state):
        g = self.buffer.xp.subtract(w_g, w, out=w)  # the pseudo-gradient, in w's memory
        getattr(self, "_" + self.outer)(w_g, g, *state)
        w[...] = w_g

    # In place throughout (kernels.axpy): a scaled copy such as lr * g would
    # be a model-sized temporary per sync on a device.
    def _sgd(self, w_g, g):
        kernels.axpy(w_g, -self.outer_lr, g)

    def _momentum(self, w_g, g, v, nesterov=False):
        v *= v.dtype.type(self.outer_momentum)
        v += g
        if nesterov:            # w_g -= lr * (g + mu * v)
            kernels.axpy(g, self.outer_momentum, v)
            kernels.axpy(w_g, -self.outer_lr, g)
        else:
            kernels.axpy(w_g, -self.outer_lr, v)

    def _nesterov(self, w_g, g, v):
        self._momentum(w_g, g, v, nesterov=True)

    def _adam(self, w_g, g, m, s):
        t, xp = w_g.dtype.type, self.buffer.xp
        m *= t(self.beta1)
        kernels.axpy(m, 1 - self.beta1, g)
        g *= g
        s *= t(self.beta2)
        kernels.axpy(s, 1 - self.beta2, g)
        bias1 = 1 - self.beta1 ** self.steps
        bias2 = 1 - self.beta2 ** self.steps
        denom = xp.sqrt(s, out=g)         # g is no longer needed
        denom /= t(math.sqrt(bias2))
        denom += t(self.eps)
        xp.divide(m, denom, out=denom)
        kernels.axpy(w_g, -self.outer_lr / bias1, denom)

    def state_dict(self):
        state = {"global_model": host_copy(self.global_model.data),
                 "steps": host_copy(self.buffer.xp.asarray([self.steps])),
                 **self.compression_state()}
        if self.velocity is not None:
            state["velocity"] = host_copy(self.velocity.data)
        if self.second_moment is not None:
            state["second_moment"] = host_copy(self.second_moment.data)
        if self.share is not None:
            state["momentum_share"] = host_copy(self.share.data)
        return state

    def _load_state(self, state):
        super()._load_state(state)
        xp = self.buffer.xp
        self.global_model.data[...] = xp.asarray(state["global_model"])
        self.steps = int(state["steps"][0])
        if self.velocity is not None:
            self.velocity.data[...] = xp.asarray(state["velocity"])
        if self.second_moment is not None:
            self.second_moment.data[...] = xp.asarray(state["second_moment"])
        if self.share is not None:      # absent (a checkpoint under global): -v's equal shares
            self.share.data[...] = xp.asarray(state["momentum_share"]) \
                if "momentum_share" in state else -self.velocity.data / self.N
