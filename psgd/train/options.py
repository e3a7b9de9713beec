"""The trainer's flags: one parser for `python -m psgd.worker`, `psgd-train`
and `psgd.train.make_config(**overrides)` from Python."""
import argparse
import sys

from ..algorithms import ALGORITHMS, REGISTRY
from ..errors import UsageError

# flag dest -> the algorithm option it sets (passed only when given)
ALGORITHM_FLAGS = {
    "alpha": "alpha", "weighting": "weighting",
    "block_momentum": "block_momentum", "block_lr": "block_lr", "nesterov": "nesterov",
    "reset_local_state": "reset_local_state",
    "outer": "outer", "outer_lr": "outer_lr", "outer_momentum": "outer_momentum",
    "barrier_period": "barrier_period",
    "masgd_momentum": "momentum", "masgd_scope": "scope",
}
DEFAULT_LR = {"sgd": 0.05, "momentum": 0.02, "nesterov": 0.02, "adagrad": 0.02,
              "adadelta": 1.0, "rmsprop": 1e-3, "adam": 2e-3}
MODELS = ("cnn", "mlp", "lstm")
SCHEDULES = ("constant", "exponential", "newbob")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line and exit status 2, not a usage wall."""

    def error(self, message):
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog, message))
        sys.exit(2)


def build_parser(prog="psgd-train"):
    p = OneLineParser(prog=prog, description="Parallel SGD over MPI. Launch with "
                      "mpirun -np N python -m psgd.worker --algo ALGO [options].")
    g = p.add_argument_group("synchronization")
    g.add_argument("--algo", default="bsp", metavar="NAME",
                   help="one of: %s (default bsp)" % ", ".join(ALGORITHMS))
    g.add_argument("--sync-period", type=int, default=None, metavar="SAMPLES",
                   help="samples (frames) a worker trains between syncs "
                        "(default 4 minibatches; syncgrad syncs every minibatch)")
    g.add_argument("--alpha", type=float, help="easgd/asgd/masgd moving rate")
    g.add_argument("--weighting", choices=("samples", "uniform"), help="bsp weighting")
    g.add_argument("--block-momentum", type=float, help="bmuf eta (default 1-1/N)")
    g.add_argument("--block-lr", type=float, help="bmuf zeta (default 1)")
    g.add_argument("--no-nesterov", dest="nesterov", action="store_const", const=False,
                   help="bmuf: classic block momentum")
    g.add_argument("--no-reset-local-state", dest="reset_local_state", action="store_const",
                   const=False, help="bmuf: keep the local optimizer state across syncs")
    g.add_argument("--outer", choices=("sgd", "momentum", "nesterov", "adam"), help="sod outer step")
    g.add_argument("--outer-lr", type=float, help="sod outer learning rate (default 0.7)")
    g.add_argument("--outer-momentum", type=float, help="sod outer momentum (default 0.9)")
    g.add_argument("--barrier-period", type=int, help="asgd/masgd bounded staleness K")
    g.add_argument("--masgd-momentum", type=float, help="masgd server momentum m (default 0.9)")
    g.add_argument("--masgd-scope", choices=("worker", "global"), help="masgd momentum scope")

    g = p.add_argument_group("model and optimizer")
    g.add_argument("--model", default="cnn", help="cnn (default) | mlp | lstm")
    g.add_argument("--hidden", default=None, help="FC layer sizes, e.g. 256,256")
    g.add_argument("--channels", default=None, help="cnn conv channels, e.g. 32,32,32")
    g.add_argument("--lstm-cells", type=int, default=None, help="LSTM cells")
    g.add_argument("--dropout", type=float, default=None, help="dropout rate")
    g.add_argument("--batchnorm", action="store_const", const=True, default=None,
                   help="cnn: BatchNorm after each conv (running statistics averaged "
                        "across workers)")
    g.add_argument("--bptt", type=int, default=20, help="LSTM truncated-BPTT chunk (frames)")
    g.add_argument("--optimizer", default="adam",
                   help="sgd | momentum | nesterov | adagrad | adadelta | rmsprop | adam")
    g.add_argument("--lr", type=float, default=None, help="learning rate (default per optimizer)")
    g.add_argument("--momentum", type=float, default=0.9, help="local momentum")
    g.add_argument("--weight-decay", type=float, default=0.0, help="L2 penalty")
    g.add_argument("--clip", type=float, default=0.0, help="gradient-norm clipping (0: off)")
    g.add_argument("--lr-schedule", choices=SCHEDULES, default="constant")
    g.add_argument("--lr-decay", type=float, default=0.9, help="exponential: factor per epoch")
    g.add_argument("--newbob-start", type=float, default=0.01,
                   help="newbob: start halving when the relative held-out loss gain is below this")
    g.add_argument("--newbob-end", type=float, default=0.001,
                   help="newbob: stop when the gain while halving is below this")
    g.add_argument("--newbob-factor", type=float, default=0.5, help="newbob: lr factor")
    g.add_argument("--epochs", type=int, default=30)
    g.add_argument("--minibatch-size", type=int, default=32)
    g.add_argument("--seed", type=int, default=777)
    g.add_argument("--init", default=None, metavar="MODEL.npz", help="start from a saved model")
    g.add_argument("--cross-validate", action="store_true",
                   help="only evaluate --init on the held-out set (Kaldi's --cross-validate)")

    g = p.add_argument_group("data (default: MNIST-1D, generated locally)")
    g.add_argument("--num-samples", type=int, default=5000, help="MNIST-1D size (4/5 train)")
    g.add_argument("--feats", default=None, help="Kaldi rspecifier, e.g. scp:data/train/feats.scp")
    g.add_argument("--targets", default=None, help="ark of int vectors or a text alignment")
    g.add_argument("--cv-feats", default=None)
    g.add_argument("--cv-targets", default=None)
    g.add_argument("--splice", type=int, default=0, help="frame context +-K")
    g.add_argument("--no-cmvn", dest="cmvn", action="store_false", help="skip global CMVN")
    g.add_argument("--num-classes", type=int, default=None)

    g = p.add_argument_group("runtime")
    g.add_argument("--backend", default=None, help="auto | numpy | cupy (env PSGD_BACKEND)")
    g.add_argument("--gpu-ids", default=None, help="GPU per local rank, e.g. 0,1,2,3")
    g.add_argument("--model-parallel", action="store_true",
                   help="FC layers model-parallel, conv layers data-parallel")
    g.add_argument("--sync-bn", action="store_true", help="model-parallel: reduce BN statistics")

    g = p.add_argument_group("outputs")
    g.add_argument("--out", default=None, metavar="MODEL.npz")
    g.add_argument("--metrics", default=None, metavar="M.jsonl")
    g.add_argument("--plot", default=None, metavar="CURVES.png")
    g.add_argument("--checkpoint-dir", default=None)
    g.add_argument("--checkpoint-every", type=int, default=1, metavar="EPOCHS")
    g.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir")
    g.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    g.add_argument("--quiet", action="store_true", help="no per-epoch log lines")

    g = p.add_argument_group("faults")
    g.add_argument("--stall-timeout", type=float, default=60.0,
                   help="report ranks that have not reached a sync after this many seconds")
    g.add_argument("--stall-abort", action="store_true", help="end the job on a stall")
    g.add_argument("--skip-nonfinite", action="store_true",
                   help="drop a worker's NaN/Inf contribution instead of stopping")
    return p


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    return validate(args)


def make_config(**overrides):
    """A validated config from Python: the CLI defaults with `overrides`."""
    args = build_parser().parse_args([])
    for key, value in overrides.items():
        if not hasattr(args, key):
            raise UsageError("unknown trainer option %r" % key)
        setattr(args, key, value)
    return validate(args)


def _positive(name, value):
    if value is not None and value <= 0:
        raise UsageError("--%s must be > 0, got %r" % (name.replace("_", "-"), value))


def validate(args):
    if args.algo not in REGISTRY:
        raise UsageError("unknown algorithm %r; valid: %s" % (args.algo, ", ".join(ALGORITHMS)))
    if args.model not in MODELS:
        raise UsageError("unknown model %r; valid: %s" % (args.model, ", ".join(MODELS)))
    if args.epochs < 0:
        raise UsageError("--epochs must be >= 0 (0 writes the initial model), got %d" % args.epochs)
    for name in ("minibatch_size", "num_samples", "sync_period", "lr", "bptt",
                 "checkpoint_every", "stall_timeout"):
        _positive(name, getattr(args, name))
    if args.splice < 0:
        raise UsageError("--splice must be >= 0, got %d" % args.splice)
    if (args.feats is None) != (args.targets is None):
        raise UsageError("--feats and --targets go together")
    if args.resume and not args.checkpoint_dir:
        raise UsageError("--resume needs --checkpoint-dir")
    if args.cross_validate and not args.init:
        raise UsageError("--cross-validate needs --init MODEL.npz")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise UsageError("--dropout must be in [0, 1), got %r" % args.dropout)
    cls = REGISTRY[args.algo]
    for flag, option in ALGORITHM_FLAGS.items():
        if getattr(args, flag) is not None and option not in cls.OPTIONS:
            raise UsageError("--%s does not apply to --algo %s" % (flag.replace("_", "-"), args.algo))
    return args


def algorithm_options(args):
    """psgd.create keyword options from the flags the user gave."""
    cls = REGISTRY[args.algo]
    return {option: getattr(args, flag) for flag, option in ALGORITHM_FLAGS.items()
            if getattr(args, flag) is not None and option in cls.OPTIONS}


def default_lr(args, num_workers):
    """The optimizer's default rate; asgd adds every worker's delta to the
    center at full gain, so the center moves N times as fast as one worker's
    optimizer and its default local rate is divided by N (measured: the
    undivided rate left asgd at 25-83% at np 5 on MNIST-1D, divided 92-93%)."""
    lr = DEFAULT_LR.get(args.optimizer, 0.01)
    return lr / num_workers if args.algo == "asgd" else lr


def default_sync_period(args):
    """Minibatches per block, by algorithm (measured on MNIST-1D at np 5):
    sod's outer Nesterov step (lr 0.7, momentum 0.9) amplifies every block,
    so it wants DiLoCo-like long blocks: 69% with 4 minibatches, 95% with 16;
    masgd's server momentum smears each delta over the worker's later syncs:
    18-44% with 4, 69-82% with 16, 84-90% with 32. Others: 4."""
    blocks = {"sod": 16, "masgd": 32}.get(args.algo, 4)
    return blocks * args.minibatch_size
