"""Algorithm options by the number of workers N: what the trainer and
psgd.torch give a user who names only the algorithm, each chosen by
measurement (benchmarks/FINDINGS.md). psgd.create keeps the contract's own
defaults (docs/algorithms.md); these are the options that made `--algo X`
at N workers as good as one worker. Some go with a larger local rate, which
the trainer sets (psgd/train/defaults.py: bmuf_lr_factor, asgd_lr_factor,
masgd_lr_factor) and a psgd.torch user sets on their optimizer (README)."""
import numbers

from .base import REGISTRY
from .masgd import Masgd


def given_over(algo, size, given):
    """The options `given` over options() for the workers among `size`
    ranks (`given` may name the servers). `given` alone where there is no
    worker to choose for (an unknown algorithm, bad servers, too few
    ranks): psgd.create names what is wrong."""
    cls, servers = REGISTRY.get(algo), given.get("servers") or 1
    if cls is None or isinstance(servers, bool) or not isinstance(servers, numbers.Integral):
        return given
    workers = cls.workers(size, servers)
    return {**options(algo, workers, given), **given} if workers >= 1 else given


def options(algo, num_workers, given=None):
    """Algorithm options by N for what the user does not set: what the
    convergence benchmark measured best (MNIST-1D CNN, Adam, 30 epochs,
    BENCHMARKS.md), the trainer's and psgd.torch's defaults:
    - easgd alpha = max(0.9 / N, 0.3): the paper's beta = N * alpha = 0.9
      pulls each worker to the center too weakly from N = 4 on.
    - bmuf block_momentum = BMUF_MOMENTUM: see there; reset_local_state off:
      clearing Adam's moments every 4-minibatch block cost points even at
      one worker and never helped.
    - sod outer_lr = SOD_OUTER_LR(N) with its default Nesterov outer step
      (the user's outer, given or not): see there.
    - asgd: the mean delta with delay compensation (asgd_mean); masgd the
      same, with its own momentum (masgd_mean).
    - bmuf and sod (linear outer steps), compressed: compression_momentum
      local: see SHARES_MOMENTUM; with 1bit a lighter momentum:
      BMUF_1BIT_MOMENTUM, SOD_1BIT_MOMENTUM.
    `given`: the options the user gave (psgd.create's names), which these
    rules read (sod's outer, masgd's momentum) and which win over them."""
    given = given or {}
    options = _by_n(algo, num_workers, given)
    if shares_by_default(algo, given):
        options["compression_momentum"] = "local"
    return options


def shares_by_default(algo, given):
    quantizer = given.get("compression")
    return (quantizer in SHARES_MOMENTUM.get(algo, ()) and given.get("outer") != "adam")


# bmuf and sod compressed keep each rank's share of the momentum and sum the
# steps: with the momentum global, 1bit's rounding passed through its gain
# and sod (mu 0.9) ended 24 points below `none` on MNIST-1D, 50 on the Kaldi
# corpus, at 4 workers (benchmarks/FINDINGS.md, "Compression on the wire:
# accuracy"). syncgrad's ranks each step their own optimizer and sum the
# steps: Adam on the 1bit sum of the gradients ended 31 points below. That
# changes syncgrad's optimizer itself (bmuf's and sod's shares sum to their
# momentum exactly), so only 1bit asks for it: Adam on the fp16 or bf16 sum
# ended within 0.25 points of `none` (6 seeds), as close as the local steps.
SHARES_MOMENTUM = {"bmuf": ("fp16", "bf16", "1bit"), "sod": ("fp16", "bf16", "1bit"),
                   "syncgrad": ("1bit",)}


def _by_n(algo, N, given):
    if algo == "easgd":
        return {"alpha": max(0.9 / N, 0.3), "staleness_compensation": "scale"}
    one_bit = given.get("compression") == "1bit"
    if algo == "sod" and given.get("outer") in (None, "nesterov"):
        options = {"outer_lr": SOD_OUTER_LR(N)}
        if one_bit:
            options["outer_momentum"] = SOD_1BIT_MOMENTUM
        return options
    if algo == "bmuf":
        eta = BMUF_1BIT_MOMENTUM(N) if one_bit else BMUF_MOMENTUM(N)
        return {"block_momentum": eta, "reset_local_state": False}
    if algo == "asgd":
        return {"staleness_compensation": "dc", "alpha": 1.0 / N} if asgd_mean(N) \
            else {"staleness_compensation": "none"}
    if algo == "masgd":
        if not masgd_mean(N, given.get("delayed")):
            return {"staleness_compensation": "dc" if N > 1 else "none"}
        mean = {"staleness_compensation": "dc", "momentum": given.get("momentum", MASGD_MOMENTUM)}
        return dict(mean, alpha=Masgd.unit_gain_alpha(mean, N) / N)
    return {}


# masgd from MASGD_MEAN_FROM workers: asgd's mean delta (the gain of one
# delta 1/N) and dc, with a lighter server momentum MASGD_MOMENTUM and
# 4-minibatch blocks, at the local rate x 2 sqrt(N) (masgd_lr_factor): the
# anneal's lower late rate lets 4-6 workers take more than the constant
# rate's max(3, N/sqrt(2)) did, and at 8 the rate was not what limited masgd
# (benchmarks/FINDINGS.md, "masgd's rate under the anneal"). The sum (gain 1)
# with the momentum 0.9 on every delta fell up to 7.7 points between two
# epochs from 4 workers, and with the delayed Nesterov update still trailed
# one worker by 2.5-4 points at 8 (benchmarks/FINDINGS.md, "masgd: the mean
# delta").
MASGD_MEAN_FROM = 4
MASGD_MOMENTUM = 0.5


def masgd_mean(num_workers, delayed=None):
    """Whether the trainer's masgd adds the mean delta: not when the user
    asks for the delayed Nesterov update (whose momentum step has its own
    gain)."""
    return not delayed and num_workers >= MASGD_MEAN_FROM


# bmuf: eta = min(1 - 1/N, 0.5), where CNTK's 1 - 1/N (the block step N times
# the mean delta) overshoots as N grows; from BMUF_RATE_FROM workers the
# local rate x max(2, N / 4) makes up the smaller block step. At 4 workers
# the one-worker rate ended 1.0 behind one worker (seeds 1-6, falls up to 3.4
# points), x2 0.2 behind (falls 2.7); block momentum 0.3 with x2 or x1.5 did
# no better at 4, and at 5-7 workers lost 0.6-0.8 points against eta 0.5
# (benchmarks/FINDINGS.md, "bmuf's rate from 4 workers").
BMUF_RATE_FROM = 4


def BMUF_MOMENTUM(N):
    return min(1.0 - 1.0 / max(N, 1), 0.5)


# With 1bit each rank sends its momentum share, about its block delta times
# the momentum's gain 1 / (1 - eta), and 1bit's rounding residual grows with
# what it sends: eta 0.3 (gain 1.4, not 2) ended 1.3 points closer to `none`
# on the Kaldi corpus at 4 workers, 6 seeds (benchmarks/FINDINGS.md, "1bit: a
# lighter momentum for bmuf and sod").
def BMUF_1BIT_MOMENTUM(N):
    return min(BMUF_MOMENTUM(N), 0.3)


# sod: the outer Nesterov step (momentum 0.9) multiplies a steady block delta
# by up to outer_lr / (1 - 0.9), which suits the averaged delta of 4 or more
# workers but overshoots with fewer: 0.7 * min(1, N / 4).
def SOD_OUTER_LR(N):
    return 0.7 * min(1.0, N / 4.0)


# sod with 1bit: the outer momentum 0.8 (gain 5, not 10) for the same reason
# as BMUF_1BIT_MOMENTUM: with 0.9 sod ended 1.5-1.7 points behind `none` on
# the Kaldi corpus at 4 and 8 workers, with 0.8 within 0.1.
SOD_1BIT_MOMENTUM = 0.8


def asgd_mean(num_workers):
    """Whether the trainer's asgd adds the mean of the deltas (alpha = 1/N),
    delay-compensated (dc), at the local rate x asgd_lr_factor: from 2
    workers. The sum of the deltas (alpha 1), at the rate / sqrt(N) with a
    local momentum of 0.5 below 6 workers, collapsed and recovered at any
    epoch (falls of 23 and 29 points between two epochs at 3 and 5 workers,
    MNIST-1D) and trailed one worker by 2.3-2.7 points from 6 workers on;
    the mean without dc still spiked (18 points at 8 workers); with dc, at
    asgd_lr_factor, no fall passed 3.4 points from 3 to 8 workers (one
    worker's own reach 5)."""
    return num_workers >= 2


def block_steps(algo, num_workers, delayed=None):
    """Minibatches per block, by algorithm: sod's outer Nesterov step
    amplifies every block, so it wants DiLoCo-like long blocks; masgd's
    server momentum 0.9 on every delta (the sum, below MASGD_MEAN_FROM)
    smears each one over the worker's later syncs. Others: 4."""
    sum_of_deltas = algo == "masgd" and not (delayed or masgd_mean(num_workers, delayed))
    return 16 if algo == "sod" else 32 if sum_of_deltas else 4
