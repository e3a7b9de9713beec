"""The trainer's defaults by number of workers N: the algorithm options, the
local rate, the large-batch rule and the block size that a user who types
only `--algo X` gets, each chosen by measurement (MNIST-1D CNN, Adam, 30
epochs; BENCHMARKS.md's convergence grid, benchmarks/FINDINGS.md). The
algorithms' own defaults (psgd.create) stay those of docs/algorithms.md."""
import math

from ..algorithms.masgd import Masgd
from .large_batch import ADAPTIVE, rule_name, scale_factor

DEFAULT_LR = {"sgd": 0.05, "momentum": 0.02, "nesterov": 0.02, "adagrad": 0.02,
              "adadelta": 1.0, "rmsprop": 1e-3, "adam": 2e-3}


def trainer_defaults(algo, num_workers, given=None):
    """Algorithm options the trainer sets when the user does not, by N. The
    algorithms' own defaults (psgd.create) stay those of docs/algorithms.md; these
    are what the convergence benchmark measured best with the trainer's data
    and models (MNIST-1D CNN, Adam, 30 epochs, BENCHMARKS.md):
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
    options = _trainer_defaults(algo, num_workers, given)
    if _shares_by_default(algo, given):
        options["compression_momentum"] = "local"
    return options


def _shares_by_default(algo, given):
    quantizer = given.get("compression")
    return (quantizer in SHARES_MOMENTUM.get(algo, ()) and given.get("outer") != "adam")


def work_shares(args, algorithm, options):
    """The workers' shares of an epoch (shares.py): the user's --work-shares;
    else by speed for a server algorithm, whose workers need not finish
    together, unless its servers keep one service order (barrier_period),
    which asks for a run that replays alike."""
    if args.work_shares is not None:
        return args.work_shares
    if algorithm.server_based and not options.get("barrier_period"):
        return "speed"
    return "equal"


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


def sums_local_steps(args):
    """Whether syncgrad's ranks step their own optimizers and sum the steps
    (compression_momentum local: given, or the trainer's when compressed)."""
    given = {"compression": args.compression}
    chosen = args.compression_momentum or ("local" if _shares_by_default(args.algo, given)
                                           else "global")
    return (args.algo == "syncgrad" and args.compression not in (None, "none")
            and chosen == "local")


def _trainer_defaults(algo, N, given):
    if algo == "easgd":
        return {"alpha": max(0.9 / N, 0.3)}
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


def masgd_lr_factor(num_workers, delayed=None):
    return 2.0 * math.sqrt(num_workers) if masgd_mean(num_workers, delayed) else 1.0


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


# The workers' local momentum (Adam's beta1) by algorithm: (from N workers,
# beta1), below that N the optimizer's own 0.9 (benchmarks/FINDINGS.md, "The
# workers' local momentum", MNIST-1D, Adam, 12 seeds at 8).
# - bmuf: the workers keep Adam's first moment across blocks, and at 0.9 it
#   remembers 10 minibatches, 2.5 of the 4-minibatch blocks whose deltas the
#   block momentum carries again. 0.5 ended 1.1 points closer to one worker
#   at 8 workers, no fall over 2.0 points where 0.9 fell up to 7.8; at 2
#   and 4 workers 0.3 closer.
# - asgd, masgd: a delta applied N - 1 center updates late acts as a
#   momentum of about 1 - 1/N of its own (Mitliagkas et al. 2016,
#   "Asynchrony begets momentum"). At 8 workers 0.7 ended 0.9 (asgd) and
#   1.5 (masgd) points closer, falls up to 2.5 (0.5 fell up to 6.6); at 6
#   both 0.6 closer; at 4 asgd 0.4 closer, masgd 0.5 further (within the
#   seeds' spread); at 2 asgd's largest fall grew from 2.1 to 3.6.
# Measured with Adam; SGD's momentum keeps its mu.
LOCAL_MOMENTUM = {"bmuf": (2, 0.5), "asgd": (4, 0.7), "masgd": (6, 0.7)}


def local_momentum(args, num_workers):
    """The local optimizer's momentum (Adam's beta1): the user's --momentum,
    else LOCAL_MOMENTUM's from its number of workers, else None (the
    optimizer's own)."""
    if args.momentum is not None:
        return args.momentum
    start, beta1 = LOCAL_MOMENTUM.get(args.algo, (None, None))
    if args.optimizer == "adam" and start is not None and num_workers >= start:
        return beta1
    return None


def bmuf_lr_factor(N):
    return max(2.0, N / 4.0) if N >= BMUF_RATE_FROM else 1.0


# sod: the outer Nesterov step (momentum 0.9) multiplies a steady block delta
# by up to outer_lr / (1 - 0.9), which suits the averaged delta of 4 or more
# workers but overshoots with fewer: 0.7 * min(1, N / 4).
def SOD_OUTER_LR(N):
    return 0.7 * min(1.0, N / 4.0)


# sod with 1bit: the outer momentum 0.8 (gain 5, not 10) for the same reason
# as BMUF_1BIT_MOMENTUM: with 0.9 sod ended 1.5-1.7 points behind `none` on
# the Kaldi corpus at 4 and 8 workers, with 0.8 within 0.1.
SOD_1BIT_MOMENTUM = 0.8


def default_lr(args):
    """The optimizer's default rate (the large-batch rule's factor aside)."""
    return DEFAULT_LR.get(args.optimizer, 0.01)


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


def asgd_paced(config):
    """Whether the trainer's asgd divides by the workers' summed pace each
    epoch (alpha = 1 / N_eff, shares.py) instead of N: its mean delta, an
    alpha not given, shares by speed. With one of 4 hosts at half rate
    behind a slow link, 1/4 takes 3.5 workers' worth of deltas a round at
    a quarter each; 1/N_eff reached 90% 0.3-0.6 s sooner over 10 seeds
    (FINDINGS, "asgd: the mean by the summed pace")."""
    return (config.run.algo == "asgd" and asgd_mean(config.run.num_workers)
            and config.flags.get("alpha") is None and config.run.work_shares == "speed")


def asgd_lr_factor(num_workers):
    """asgd's mean delta moves the center 1/N of a worker's way per sync, so
    its local rate grows with N: max(3, N / 2), for every optimizer. Adam:
    x2 ended 0.3 and 0.9 points below x3 at 3 and 4 workers; at 8, x3, x4
    and x5.66 ended 1.5, 0.4-1.0 and 0.6 points behind one worker. SGD with
    momentum at 8: the linear rule's x8 diverged, x4 1.6 behind."""
    return max(3.0, num_workers / 2.0) if asgd_mean(num_workers) else 1.0


# The large-batch rule (large_batch.py) by algorithm: not for bmuf (its block
# step has its own factor, bmuf_lr_factor) nor the asgd family (asgd_lr_factor,
# masgd_lr_factor). For adaptive
# optimizers bsp and syncgrad start linear (x2 at 2 workers, x3 from 3 to 9,
# then sqrt(N)): sqrt(4) = 2 left them about a point behind one worker at 4;
# sod keeps sqrt(N), as its outer step amplifies the rate. easgd takes the
# linear rule with every optimizer: its center averages N workers' own
# trajectories, and at x3 it trailed one worker by 2.6 points at 8 workers
# (x5.66 1.0, x8 0.1-0.3, x11.3 0.7; at 4 workers x4 0.3 above x3; measured
# to 8 workers; benchmarks/FINDINGS.md, "easgd: the linear rate").
LR_SCALED = ("bsp", "easgd", "sod", "syncgrad")
LINEAR_START = ("bsp", "syncgrad")
LINEAR = ("easgd",)
WARMUP_EPOCHS = 2


def lr_scale(args, num_workers):
    """k, the factor the large-batch rule multiplies the rate by (1: off)."""
    if not args.lr_scaling:
        return 1.0
    if args.algo == "asgd":
        return asgd_lr_factor(num_workers)
    if args.algo == "masgd":
        return masgd_lr_factor(num_workers, args.masgd_delayed_nesterov)
    if args.algo == "bmuf":
        return bmuf_lr_factor(num_workers)
    if args.algo not in LR_SCALED:
        return 1.0
    return scale_factor(args.optimizer, num_workers, args.algo in LINEAR_START,
                        args.algo in LINEAR) * local_steps_factor(args, num_workers)


def local_steps_factor(args, num_workers):
    """syncgrad summing local steps of an adaptive optimizer: x sqrt(N), at
    most LOCAL_STEPS_MAX. Each rank's second moment sees its own minibatch,
    N times the mean gradient's variance, so where the noise dominates its
    steps are sqrt(N) shorter than Adam's on the mean. At 4 workers, seeds
    1-6, 1bit: x1 ended 0.8 points below `none` on MNIST-1D, x2 0.5 above;
    at 8, sqrt(8) on top of the linear start's x3 collapsed on one seed of
    three (89.9%, a fall of 13.7 points) where x2 ended 95.5-96.4% (FINDINGS,
    "syncgrad's optimizer shares"). SGD and momentum are linear in g: the
    sum of the local steps is the step of the sum."""
    if args.optimizer in ADAPTIVE and sums_local_steps(args):
        return min(math.sqrt(num_workers), LOCAL_STEPS_MAX)
    return 1.0


LOCAL_STEPS_MAX = 2.0


def lr_rule_name(args):
    if args.algo == "bmuf":
        return "bmuf N/4"
    if args.algo == "asgd":
        return "asgd 3x, then N/2"
    if args.algo == "masgd":
        return "masgd 2 sqrt(N)"
    name = rule_name(args.optimizer, args.algo in LINEAR_START, args.algo in LINEAR)
    return (name + ", local steps x min(sqrt(N), %g)" % LOCAL_STEPS_MAX
            if local_steps_factor(args, 4) != 1.0 else name)


def warmup_epochs(args):
    """bmuf's factor was measured without a warm-up (with one it did worse),
    and asgd's and masgd's too."""
    if args.warmup_epochs is not None:
        return args.warmup_epochs
    return 0 if args.algo in ("bmuf", "asgd", "masgd") else WARMUP_EPOCHS


def default_sync_period(args, num_workers):
    """Minibatches per block, by algorithm: sod's outer Nesterov step
    amplifies every block, so it wants DiLoCo-like long blocks; masgd's
    server momentum 0.9 on every delta (the sum, below MASGD_MEAN_FROM)
    smears each one over the worker's later syncs. Others: 4."""
    delayed = args.masgd_delayed_nesterov
    sum_of_deltas = args.algo == "masgd" and not (delayed or masgd_mean(num_workers, delayed))
    blocks = 16 if args.algo == "sod" else 32 if sum_of_deltas else 4
    return blocks * args.minibatch_size
