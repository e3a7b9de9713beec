"""The trainer's defaults by number of workers N: the local rate, the
large-batch rule and the block size that a user who types only `--algo X`
gets, beside the algorithm options by N (psgd/algorithms/by_n.py), each
chosen by measurement (MNIST-1D CNN, Adam, 30 epochs; BENCHMARKS.md's
convergence grid, benchmarks/FINDINGS.md). The algorithms' own defaults
(psgd.create) stay those of docs/algorithms.md."""
import math

from ..algorithms import by_n
from ..algorithms.by_n import BMUF_RATE_FROM, asgd_mean, masgd_mean, shares_by_default
from .large_batch import ADAPTIVE, rule_name, scale_factor

DEFAULT_LR = {"sgd": 0.05, "momentum": 0.02, "nesterov": 0.02, "adagrad": 0.02,
              "adadelta": 1.0, "rmsprop": 1e-3, "adam": 2e-3}


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


def sums_local_steps(args):
    """Whether syncgrad's ranks step their own optimizers and sum the steps
    (compression_momentum local: given, or the trainer's when compressed)."""
    given = {"compression": args.compression}
    chosen = args.compression_momentum or ("local" if shares_by_default(args.algo, given)
                                           else "global")
    return (args.algo == "syncgrad" and args.compression not in (None, "none")
            and chosen == "local")


# The server algorithms' model: the center averaged over a quarter of an
# epoch (center_average.py). It took the mean of the runs' largest fall
# after epoch 10 from 1.0-1.1 points to 0.6-0.8 at 4 and 8 workers, at the
# same final accuracy and epochs to 90% (benchmarks/FINDINGS.md, "The
# server's center averaged"); half an epoch measured alike.
AVERAGE_EPOCHS = 0.25


def center_average_examples(total_train):
    """average_examples unless given: AVERAGE_EPOCHS of the training set."""
    return AVERAGE_EPOCHS * total_train


def masgd_lr_factor(num_workers, delayed=None):
    return 2.0 * math.sqrt(num_workers) if masgd_mean(num_workers, delayed) else 1.0


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


def default_lr(args):
    """The optimizer's default rate (the large-batch rule's factor aside)."""
    return DEFAULT_LR.get(args.optimizer, 0.01)


def asgd_paced(config):
    """Whether the trainer's asgd divides by the workers' summed pace each
    epoch (alpha = 1 / N_eff, shares.py) instead of N: its mean delta, an
    alpha not given, shares by speed. With one of 4 hosts at half rate
    behind a slow link, 1/4 takes 3.5 workers' worth of deltas a round at
    a quarter each; 1/N_eff reached 90% 0.3-0.6 s sooner over 10 seeds
    (FINDINGS, "asgd: the mean by the summed pace")."""
    return (config.run.algo == "asgd" and asgd_mean(config.run.num_workers)
            and config.flags.get("alpha") is None and config.run.work_shares == "speed")


# asgd's local rate: x3 up to this many workers, then max(4, N / 2)
ASGD_X3_UP_TO = 3


def asgd_lr_factor(num_workers):
    """asgd's mean delta moves the center 1/N of a worker's way per sync, so
    its local rate grows with N, for every optimizer (the SGD family's
    linear N diverged at 8 workers): x3 up to ASGD_X3_UP_TO workers, then
    max(4, N / 2) (benchmarks/FINDINGS.md, "asgd's rate from 5 workers").
    At 4 workers x4 fell more often between two epochs while the model
    kept was the center; with its average it does not, and it learns
    faster ("The server's center averaged")."""
    if not asgd_mean(num_workers):
        return 1.0
    return 3.0 if num_workers <= ASGD_X3_UP_TO else max(4.0, num_workers / 2.0)


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
        return "asgd 3x to %d workers, then max(4, N/2)" % ASGD_X3_UP_TO
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
    """Minibatches per block: by_n.block_steps, times the minibatch size."""
    return by_n.block_steps(args.algo, num_workers, args.masgd_delayed_nesterov) \
        * args.minibatch_size
