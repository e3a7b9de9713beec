"""masgd: asgd with server-side momentum (Kaldi's MasgdServer).

Worker k: as asgd (push w_k - w_prev, pull x). Server, on MSG_SYNC from k:
    Recv(delta_k)
    v <- m * v + delta_k
    x <- x + alpha * v
    Send(x)
scope = worker: one v per worker (the reference's default LMASGD); global: one
shared v (GMASGD). Defaults m = 0.9, alpha = 1 - m: the steady-state gain is
1, like asgd (the reference's implicit gain is 1 / (1 - m)). barrier_period
works as in asgd.
"""
import numpy as np

from .. import kernels
from ..buffers import host_copy
from .asgd import OPTIONS as ASGD_OPTIONS, Asgd, AsgdServer
from .base import Option, positive, register


def _momentum_range(m):
    return None if 0.0 <= m < 1.0 else "must satisfy 0 <= momentum < 1"


OPTIONS = {**ASGD_OPTIONS,
           "alpha": Option(None, positive),     # not given: 1 - momentum (resolve_options)
           "momentum": Option(0.9, _momentum_range),
           "scope": Option("worker", kind=("worker", "global"))}


class MasgdServer(AsgdServer):
    name = "masgd"
    OPTIONS = OPTIONS
    SHARDED_STATE = ("center", "velocity")
    momentum: float
    scope: str

    def is_global_state(self, key):
        # one v per worker (scope = worker) is a worker's own; the shared one global
        if key == "velocity":
            return self.scope == "global"
        return super().is_global_state(key)

    def initialized(self):
        count = self.N if self.scope == "worker" else 1
        self.velocities = [self.center.like() for _ in range(count)]   # of this shard
        super().initialized()

    def restart(self):
        super().restart()
        for v in self.velocities:
            v.data.fill(0)

    def velocity(self, rank):
        return self.velocities[rank - self.servers if self.scope == "worker" else 0]

    def update(self, rank, lo, hi):
        delta = self.incoming.data[lo:hi]
        gain = self.gain()
        if gain != 1.0:
            delta *= delta.dtype.type(gain)
        # v <- m v + delta_k;  x <- x + alpha v   (one pass; delta is scratch afterwards)
        kernels.momentum_step(self.center.data[lo:hi], self.velocity(rank).data[lo:hi], delta,
                              self.momentum, self.alpha)

    def state_dict(self):
        state = super().state_dict()
        state["velocity"] = np.stack([host_copy(v.data) for v in self.velocities])
        return state

    def _load_state(self, state):
        super()._load_state(state)
        for v, saved in zip(self.velocities, state["velocity"]):
            v.data[...] = self.buffer.xp.asarray(saved)


@register
class Masgd(Asgd):
    name = "masgd"
    OPTIONS = OPTIONS
    server = MasgdServer
    momentum: float
    scope: str

    @classmethod
    def resolve_options(cls, options, size, servers=1):
        options = dict(options)
        if options.get("alpha") is None:
            m = cls.OPTIONS["momentum"].resolve("momentum", options.get("momentum"),
                                                cls.workers(size, servers))
            options["alpha"] = 1.0 - m
        return super().resolve_options(options, size, servers)
