"""sod: an outer optimizer on the averaged model difference (reference
SodWorker, DiLoCo-style), stepping the common model w_g.

    g   = sum_k (n_k / n) * (w_g - w_k)      pseudo-gradient
    w_g <- outer_step(w_g, g)                sgd | momentum | nesterov | adam
    w_k <- w_g
Outer steps follow PyTorch's conventions, with state starting at 0.
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


@register
class Sod(CollectiveWorker):
    name = "sod"
    OPTIONS = {
        "outer": Option("nesterov", kind=OUTER_STEPS, help="the outer step (default nesterov)"),
        "outer_lr": Option(0.7, positive,
                           help="outer learning rate (default 0.7; the trainer's with the "
                                "nesterov outer step: 0.7 * min(1, N/4))"),
        "outer_momentum": Option(0.9, _unit_interval,
                                 help="outer momentum of momentum and nesterov (default 0.9)"),
        "beta1": Option(0.9, _unit_interval, flag="outer_beta1",
                        help="adam outer step's beta1 (default 0.9)"),
        "beta2": Option(0.999, _unit_interval, flag="outer_beta2",
                        help="adam outer step's beta2 (default 0.999)"),
        "eps": Option(1e-8, positive, flag="outer_eps",
                      help="adam outer step's epsilon (default 1e-8)"),
        **compressed.OPTIONS,
    }
    GLOBAL_STATE = ("global_model", "steps", "velocity", "second_moment")
    beta1: float
    beta2: float

    def initialized(self):
        self.global_model = self.buffer.like()
        self.velocity = self.buffer.like() if self.outer != "sgd" else None
        self.second_moment = self.buffer.like() if self.outer == "adam" else None
        self.restart()

    def restart(self):
        self.global_model.data[...] = self.buffer.data
        for state in (self.velocity, self.second_moment):
            if state is not None:
                state.data.fill(0)
        self.steps = 0          # Adam's bias correction starts over too

    def update(self, n_k, n, active):
        self.steps += 1
        self.average(n_k, n, active, then=self._outer_step)

    def _outer_step(self, lo, hi):
        """The outer step on w[lo:hi], once that part of the average arrived."""
        state = [b.data[lo:hi] for b in (self.velocity, self.second_moment) if b is not None]
        # Block by block: all of the step's passes meet a block in cache.
        kernels.blockwise(self._update, self.buffer.data[lo:hi],
                          self.global_model.data[lo:hi], *state)

    def start_point(self, out):
        out[...] = self.global_model.data

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
