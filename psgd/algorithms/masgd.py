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

delayed = true (Liu et al. 2024's delayed Nesterov update, in asgd's sign
convention): every delta is applied at once, as in asgd, and added to a
buffer b; on every D-th update (D = delay_period, default N) the server
takes one Nesterov step on the mean delta of the period and removes the
plain sum it already applied:
    x <- x + delta_k';  b <- b + delta_k'
    every D-th:  v <- m * v + b / D
                 x <- x + alpha * (m * v + b / D) - b;  b <- 0
One v (scope does not apply). alpha defaults to D * (1 - m): steady-state
gain 1 per delta, as above; with m = 0 it is asgd.
"""
import numpy as np

from .. import kernels
from ..buffers import host_copy
from .asgd import OPTIONS as ASGD_OPTIONS, Asgd, AsgdServer
from .base import register
from .in_flight import Transfer
from .option import Option, positive


def _momentum_range(m):
    return None if 0.0 <= m < 1.0 else "must satisfy 0 <= momentum < 1"


def _undelayed(options):
    return "applies without delayed=true, whose update keeps one velocity" \
        if options["delayed"] else None


def _delayed(options):
    return None if options["delayed"] else \
        "is the delayed Nesterov update's; it does nothing without delayed=true"


OPTIONS = {**ASGD_OPTIONS,
           # not given: 1 - momentum (resolve_options)
           "alpha": Option(None, positive, help="the center's gain (default 1; masgd: 1 - m)"),
           "momentum": Option(0.9, _momentum_range, flag="masgd_momentum",
                              help="server momentum m (default 0.9)"),
           "scope": Option("worker", kind=("worker", "global"), flag="masgd_scope",
                           applies=_undelayed,
                           help="one velocity per worker (default) or one global"),
           "delayed": Option(False, kind=bool, flag="masgd_delayed_nesterov",
                             help="apply each delta at once and the server momentum once every "
                                  "D updates (delayed Nesterov)"),
           "delay_period": Option(lambda N: max(N, 1), positive, kind=int,
                                  flag="masgd_delay_period", applies=_delayed,
                                  help="delayed Nesterov: updates per momentum step (default N)")}


class MasgdServer(AsgdServer):
    name = "masgd"
    OPTIONS = OPTIONS
    SHARDED_STATE = ("center", "average", "velocity")
    # the delayed update's open period restarts at another N (its deltas are
    # in the center already: only that period's momentum step is skipped)
    WORKER_STATE = ("period_sum", "in_period")

    def is_global_state(self, key):
        # one v per worker (scope = worker) is a worker's own; the shared one global
        if key == "velocity":
            return self.scope == "global" or self.delayed
        return super().is_global_state(key)

    def initialized(self):
        count = self.N if self.scope == "worker" and not self.delayed else 1
        self.velocities = [self.center.like() for _ in range(count)]   # of this shard
        self.period_sum = self.center.like() if self.delayed else None  # b
        self.in_period = 0                  # deltas in b
        super().initialized()

    def restart(self):
        super().restart()
        for v in self.velocities:
            v.data.fill(0)
        if self.delayed:
            self.period_sum.data.fill(0)
            self.in_period = 0

    def velocity(self, rank):
        return self.velocities[rank - self.servers if len(self.velocities) > 1 else 0]

    def serve(self, rank):
        reply = super().serve(rank)
        if not isinstance(reply, Transfer):     # else its update comes in arrived()
            self._counted()
        return reply

    def arrived(self, transfer):
        super().arrived(transfer)
        self._counted()

    def _counted(self):
        """One more update of the delayed Nesterov period."""
        if self.delayed:
            self.in_period = (self.in_period + 1) % self.delay_period

    def update(self, rank, lo, hi):
        delta = self.incoming.data[lo:hi]
        gain = self.gain()
        if gain != 1.0:
            delta *= delta.dtype.type(gain)
        if self.delayed:
            self._delayed_update(delta, lo, hi)
            return
        # v <- m v + delta_k;  x <- x + alpha v   (one pass; delta is scratch afterwards)
        kernels.momentum_step(self.center.data[lo:hi], self.velocity(rank).data[lo:hi], delta,
                              self.momentum, self.alpha)

    def _delayed_update(self, delta, lo, hi):
        x, b = self.center.data[lo:hi], self.period_sum.data[lo:hi]
        x += delta
        b += delta
        if self.in_period + 1 < self.delay_period:
            return
        t, D, m = x.dtype.type, self.delay_period, self.momentum
        v = self.velocities[0].data[lo:hi]
        b *= t(1.0 / D)                                     # b / D, the period's mean delta
        v *= t(m)
        v += b                                              # v <- m v + b / D
        kernels.axpy(x, self.alpha * m, v)
        kernels.axpy(x, self.alpha - D, b)                 # + alpha b/D - b
        b.fill(0)

    def state_dict(self):
        state = super().state_dict()
        state["velocity"] = np.stack([host_copy(v.data) for v in self.velocities])
        if self.delayed:
            state["period_sum"] = host_copy(self.period_sum.data)
            state["in_period"] = np.array([self.in_period], dtype=np.int64)
        return state

    def _load_state(self, state):
        super()._load_state(state)
        for v, saved in zip(self.velocities, state["velocity"]):
            v.data[...] = self.buffer.xp.asarray(saved)
        if self.delayed:
            self.period_sum.data[...] = self.buffer.xp.asarray(state["period_sum"])
            self.in_period = int(state["in_period"][0])


@register
class Masgd(Asgd):
    name = "masgd"
    OPTIONS = OPTIONS
    server = MasgdServer

    @classmethod
    def unit_gain_alpha(cls, options, N):
        """The alpha whose steady-state gain is 1 per delta, as asgd's alpha 1:
        1 - m; under the delayed update D * (1 - m)."""
        m = cls.OPTIONS["momentum"].resolve("momentum", options.get("momentum"), N)
        if not options.get("delayed"):
            return 1.0 - m
        return (1.0 - m) * cls.OPTIONS["delay_period"].resolve(
            "delay_period", options.get("delay_period"), N)

    @classmethod
    def resolve_options(cls, options, size, servers=1):
        options = dict(options)
        if options.get("alpha") is None:
            options["alpha"] = cls.unit_gain_alpha(options, cls.workers(size, servers))
        resolved = super().resolve_options(options, size, servers)
        if not resolved["delayed"]:
            # the delayed update's alone: a resume on another N would report
            # its default (N) as changed where it does nothing
            resolved["delay_period"] = None
        return resolved
