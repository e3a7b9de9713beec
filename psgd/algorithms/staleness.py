"""Staleness compensation for asgd and masgd: what the server does to a delta
pushed by worker k that started from the center x_start (the center as it was
`tau` updates ago, when k last got it) before it applies it to x, the center now.

    none:   delta' = delta
    scale:  delta' = delta / max(1, tau)            (Zhang et al., IJCAI 2016)
    dc:     c      = lambda / mean(delta * delta)
            delta' = delta - min(c * delta * delta, 1) * (x - x_start)
                                                    (Zheng et al., ICML 2017)

dc is DC-ASGD's first-order correction g(x) ~ g(x_start) + H (x - x_start)
with H ~ lambda * g * g, adapted to a delta of several local steps: the
delta stands for -eta * g, so the curvature times the step, eta * H, becomes
c * delta * delta, normalized by the delta's own mean square (the local
optimizer's rate and the number of local steps drop out; DC-ASGD-a normalizes
by a mean square too) and capped at 1, where the correction would remove all
of the center's movement since x_start along that coordinate. Cost: the
server keeps x_start for every worker (N model copies, refreshed by one copy
per reply). The worker sends its delta's mean square (one float64 on
TAG_MODEL before the delta, where its push is not compressed), so the server
corrects and applies each piece as it arrives instead of waiting for the
whole delta (docs/protocol.md).
"""
from .. import kernels
from .option import Option

COMPENSATIONS = ("none", "scale", "dc")


def _non_negative(v):
    return None if v >= 0 else "must be >= 0"


def _dc_only(options):
    chosen = options["staleness_compensation"]
    return None if chosen == "dc" else \
        "applies to staleness_compensation=dc, and it is %s" % chosen


OPTIONS = {"staleness_compensation": Option(
               "none", kind=COMPENSATIONS,
               help="correct a stale delta (scale: divide by its staleness; dc: DC-ASGD "
                    "delay compensation; default none, the trainer's: by N)"),
           "dc_lambda": Option(1.0, _non_negative, applies=_dc_only,
                               help="dc: curvature scale lambda (default 1)")}


def staleness_gain(compensation, tau):
    """The factor the server multiplies a delta of staleness `tau` by."""
    return 1.0 / max(1, tau) if compensation == "scale" else 1.0


def elastic_gain(compensation, tau, N):
    """easgd's factor on alpha for a model of staleness `tau` (scale): 1 up
    to N, a round of the workers (easgd's tau in line), N / tau beyond."""
    return min(1.0, N / max(1, tau)) if compensation == "scale" else 1.0


class DelayCompensation:
    """The dc rule's x_start per worker: the center each worker last got."""

    def __init__(self, center, ranks, lam):
        self.lam = lam
        self.starts = {rank: center.copy() for rank in ranks}

    def correct(self, rank, x, delta, mean_sq=None, lo=0, hi=None):
        """Elements [lo, hi) of `delta`, corrected against x's; mean_sq: the
        whole delta's mean square, which a piece alone does not have."""
        part = slice(lo, hi)
        kernels.delay_compensate(delta[part], x[part], self.starts[rank].data[part], self.lam,
                                 mean_sq)

    def replied(self, rank, x):
        self.starts[rank].data[...] = x

    def reset(self, x):
        for start in self.starts.values():
            start.data[...] = x
