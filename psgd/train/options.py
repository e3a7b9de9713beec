"""The trainer's flags: one parser for `python -m psgd.worker`, `psgd-train`
and `psgd.train.make_config(**overrides)` from Python."""
import argparse
import math

from ..algorithms import ALGORITHMS, REGISTRY, by_n
from ..command_line import OneLineParser, boolean as kaldi_boolean
from ..errors import UsageError
from . import algorithm_flags
from .algorithm_flags import ALGORITHM_FLAGS
from .defaults import WARMUP_EPOCHS
from .model_files import writes_nnet1
from .roles import server_count
from .schedule import DEFAULT as DEFAULT_SCHEDULE, KINDS as SCHEDULES
from .shares import KINDS as SHARE_KINDS

MODELS = ("cnn", "mlp", "lstm")


# Flags that act only beside another: None in the parser, so that giving one
# where it would change nothing is refused; their defaults are set in validate.
IDLE_DEFAULTS = {"binary": True, "checkpoint_every": 1, "bptt": 20, "lr_decay": 0.9,
                 "newbob_start": 0.01, "newbob_end": 0.001, "newbob_factor": 0.5}

FLOAT32_MAX = 3.4028234663852886e38


def finite_float(text):
    """A float flag's value: finite, and finite in float32 too (the model's
    arithmetic), so --lr inf, --stall-timeout nan or --lr 1e300 fail at parse
    time instead of as a non-finite model after the first sync, or a watchdog
    that silently never fires."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError("invalid float value: %r" % (text,)) from None
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        raise argparse.ArgumentTypeError("%r is not a finite (float32) number" % (text,))
    return value


def build_parser(prog="psgd-train"):
    p = OneLineParser(prog=prog, description="Parallel SGD over MPI. Launch with "
                      "mpirun -np N python -m psgd.worker --algo ALGO [options].")
    g = p.add_argument_group("synchronization")
    g.add_argument("--algo", default="bsp", metavar="NAME",
                   help="one of: %s (default bsp)" % ", ".join(ALGORITHMS))
    g.add_argument("--sync-period", type=int, default=None, metavar="SAMPLES",
                   help="samples (frames) a worker trains between syncs "
                        "(default 4 minibatches; syncgrad syncs every minibatch)")
    g.add_argument("--servers", type=int, default=None, metavar="S",
                   help="easgd/asgd/masgd: ranks 0..S-1 serve, each one shard of the "
                        "model (default 1)")
    g.add_argument("--work-shares", choices=SHARE_KINDS, default=None,
                   help="easgd/asgd/masgd: speed (each worker's examples per epoch in "
                        "proportion to its rate in the last epoch, and its block in "
                        "proportion to its compute rate over the fastest's, so a slow "
                        "host neither holds the others at each epoch's end nor sends "
                        "staler work) or equal (its own shard once, the block as given); "
                        "default speed, equal with --barrier-period")
    algorithm_flags.add_to(g, finite_float)

    g = p.add_argument_group("model and optimizer")
    g.add_argument("--model", default="cnn", help="cnn (default) | mlp | lstm")
    g.add_argument("--hidden", default=None, help="FC layer sizes, e.g. 256,256")
    g.add_argument("--channels", default=None, help="cnn conv channels, e.g. 32,32,32")
    g.add_argument("--lstm-cells", type=int, default=None, help="LSTM cells")
    g.add_argument("--dropout", type=finite_float, default=None, help="dropout rate")
    g.add_argument("--batchnorm", action="store_const", const=True, default=None,
                   help="cnn: BatchNorm after each conv (running statistics averaged "
                        "across workers)")
    g.add_argument("--bptt", type=int, default=None,
                   help="lstm: truncated-BPTT chunk in frames (default %d)" % IDLE_DEFAULTS["bptt"])
    g.add_argument("--optimizer", default="adam",
                   help="sgd | momentum | nesterov | adagrad | adadelta | rmsprop | adam")
    g.add_argument("--lr", type=finite_float, default=None, help="learning rate (default per optimizer)")
    g.add_argument("--momentum", type=finite_float, default=None,
                   help="local momentum: mu of momentum, nesterov and rmsprop, beta1 of adam "
                        "(default the optimizer's: 0.9, rmsprop 0)")
    g.add_argument("--weight-decay", type=finite_float, default=0.0, help="L2 penalty")
    g.add_argument("--clip", type=finite_float, default=0.0, help="gradient-norm clipping (0: off)")
    g.add_argument("--lr-schedule", choices=SCHEDULES, default=None,
                   help="default anneal: the rate holds for the first half of the epochs, "
                        "then falls along a half cosine to 0.3 of itself; constant keeps it")
    g.add_argument("--lr-decay", type=finite_float, default=None,
                   help="exponential: factor per epoch (default %g)" % IDLE_DEFAULTS["lr_decay"])
    g.add_argument("--newbob-start", type=finite_float, default=None,
                   help="newbob: start halving when the relative held-out loss gain is below "
                        "this (default %g)" % IDLE_DEFAULTS["newbob_start"])
    g.add_argument("--newbob-end", type=finite_float, default=None,
                   help="newbob: stop when the gain while halving is below this (default %g)"
                        % IDLE_DEFAULTS["newbob_end"])
    g.add_argument("--newbob-factor", type=finite_float, default=None,
                   help="newbob: lr factor (default %g)" % IDLE_DEFAULTS["newbob_factor"])
    g.add_argument("--no-lr-scaling", dest="lr_scaling", action="store_false",
                   help="keep the one-worker rate at N > 1 (default: the large-batch rule, "
                        "see psgd/train/large_batch.py)")
    g.add_argument("--warmup-epochs", type=int, default=None,
                   help="epochs to ramp up to the scaled rate (default %d)" % WARMUP_EPOCHS)
    g.add_argument("--epochs", type=int, default=30)
    g.add_argument("--minibatch-size", type=int, default=32)
    g.add_argument("--seed", type=int, default=777)
    g.add_argument("--init", default=None, metavar="MODEL",
                   help="start from a saved model: psgd .npz or Kaldi nnet1 (binary or text)")
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
    g.add_argument("--feature-transform", default=None, metavar="FILE",
                   help="Kaldi feature transform (Splice/AddShift/Rescale nnet1) applied to "
                        "the input instead of --splice and global CMVN")

    g = p.add_argument_group("runtime")
    g.add_argument("--backend", default=None, help="auto | numpy | cupy (env PSGD_BACKEND)")
    g.add_argument("--gpu-ids", default=None, help="GPU per local rank, e.g. 0,1,2,3")
    g.add_argument("--cuda-aware", default=None, choices=("auto", "yes", "no"),
                   help="hand device buffers to MPI directly (yes) or stage them through "
                        "pinned host memory (no); auto asks the MPI library "
                        "(env PSGD_CUDA_AWARE; default auto)")
    g.add_argument("--exchange", default=None, choices=("auto", "mpi", "nccl"),
                   help="what sums the collective algorithms' device buffers: NCCL, or MPI; "
                        "auto takes NCCL when every rank has a GPU and NCCL loads "
                        "(env PSGD_EXCHANGE; default auto)")
    g.add_argument("--model-parallel", action="store_true",
                   help="FC layers model-parallel, conv layers data-parallel")
    g.add_argument("--sync-bn", action="store_true", help="model-parallel: reduce BN statistics")

    g = p.add_argument_group("outputs")
    g.add_argument("--out", default=None, metavar="MODEL",
                   help="MODEL.npz, or NAME.nnet for Kaldi nnet1 (with final.feature_transform "
                        "and ali_train_pdf.counts beside it)")
    g.add_argument("--binary", type=kaldi_boolean, default=None, metavar="true|false",
                   help="nnet1 --out in Kaldi's binary format (default %s)" % str(
                       IDLE_DEFAULTS["binary"]).lower())
    g.add_argument("--metrics", default=None, metavar="M.jsonl")
    g.add_argument("--plot", default=None, metavar="CURVES.png")
    g.add_argument("--timeline", default=None, metavar="TRACE.json",
                   help="a trace of every rank (Chrome trace format: Perfetto, "
                        "chrome://tracing; python -m psgd.timeline draws it), written at "
                        "each checkpoint and at the end")
    g.add_argument("--checkpoint-dir", default=None)
    g.add_argument("--checkpoint-every", type=int, default=None, metavar="EPOCHS",
                   help="with --checkpoint-dir (default %d)" % IDLE_DEFAULTS["checkpoint_every"])
    g.add_argument("--resume", action="store_true", help="continue from --checkpoint-dir")
    g.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    g.add_argument("--quiet", action="store_true", help="no per-epoch log lines")

    g = p.add_argument_group("faults")
    g.add_argument("--stall-timeout", type=finite_float, default=60.0,
                   help="report ranks that have not reached a sync after this many seconds")
    g.add_argument("--stall-abort", action="store_true", help="end the job on a stall")
    g.add_argument("--skip-nonfinite", action="store_true",
                   help="drop a worker's NaN/Inf contribution instead of stopping")
    return p


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    return validate(args)


def make_config(**overrides):
    """Validated flags from Python: the CLI defaults with `overrides`."""
    defaults = vars(build_parser().parse_args([]))
    for key in overrides:
        if key not in defaults:
            raise UsageError("unknown trainer option %r" % key)
    return validate(argparse.Namespace(**dict(defaults, **overrides)))


def _positive(name, value):
    if value is not None and value <= 0:
        raise UsageError("--%s must be > 0, got %r" % (name.replace("_", "-"), value))


def validate(args):
    """The flags `args` checked, as a new Namespace with the idle flags'
    defaults filled in (the Trainer resolves it: config.py)."""
    if args.algo not in REGISTRY:
        raise UsageError("unknown algorithm %r; valid: %s" % (args.algo, ", ".join(ALGORITHMS)))
    if args.model not in MODELS:
        raise UsageError("unknown model %r; valid: %s" % (args.model, ", ".join(MODELS)))
    if args.epochs < 0:
        raise UsageError("--epochs must be >= 0 (0 writes the initial model), got %d" % args.epochs)
    if not 0 <= args.seed < 2 ** 32:
        raise UsageError("--seed must be in [0, 2^32 - 1], got %d" % args.seed)
    for name in ("minibatch_size", "num_samples", "sync_period", "lr", "bptt",
                 "checkpoint_every", "stall_timeout"):
        _positive(name, getattr(args, name))
    if args.warmup_epochs is not None and args.warmup_epochs < 0:
        raise UsageError("--warmup-epochs must be >= 0, got %d" % args.warmup_epochs)
    for dest in _float_dests():
        value = getattr(args, dest, None)
        if value is not None:
            try:
                finite_float(value)
            except argparse.ArgumentTypeError as exc:
                raise UsageError("--%s: %s" % (dest.replace("_", "-"), exc)) from None
    if args.splice < 0:
        raise UsageError("--splice must be >= 0, got %d" % args.splice)
    _positive("num_classes", args.num_classes)
    _refuse_idle_flags(args)
    args = argparse.Namespace(**dict(vars(args), **{
        name: default for name, default in IDLE_DEFAULTS.items() if getattr(args, name) is None}))
    if (args.feats is None) != (args.targets is None):
        raise UsageError("--feats and --targets go together")
    if args.resume and not args.checkpoint_dir:
        raise UsageError("--resume needs --checkpoint-dir")
    if args.cross_validate and not args.init:
        raise UsageError("--cross-validate needs --init MODEL")
    if args.feature_transform and args.feats is None:
        raise UsageError("--feature-transform applies to Kaldi features: give --feats")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise UsageError("--dropout must be in [0, 1), got %r" % args.dropout)
    cls = REGISTRY[args.algo]
    server_count(cls, args.servers, args.model_parallel)
    if args.work_shares is not None and not cls.server_based:
        raise UsageError("--work-shares applies to the server algorithms (easgd, asgd, "
                         "masgd): --algo %s syncs every worker together, so each takes its "
                         "own shard" % args.algo)
    if args.model_parallel:
        given = [f for f in ["sync_period", "work_shares", *ALGORITHM_FLAGS]
                 if getattr(args, f) is not None]
        if given:
            raise UsageError("--%s changes nothing with --model-parallel, whose ranks sum "
                             "gradients every minibatch without a synchronization algorithm"
                             % given[0].replace("_", "-"))
    elif args.sync_period is not None and cls.needs_grads:
        raise UsageError("--sync-period changes nothing with --algo %s, which syncs every "
                         "minibatch" % args.algo)
    for flag, option in ALGORITHM_FLAGS.items():
        if getattr(args, flag) is not None and option not in cls.OPTIONS:
            if option.startswith("compression") and cls.not_compressed:
                raise UsageError("--%s: %s" % (flag.replace("_", "-"), cls.not_compressed))
            raise UsageError("--%s does not apply to --algo %s" % (flag.replace("_", "-"), args.algo))
    return args


_FLOAT_DESTS = []


def _float_dests():
    """The dests of the float flags (make_config sets them from Python)."""
    if not _FLOAT_DESTS:
        _FLOAT_DESTS.extend(a.dest for a in build_parser()._actions if a.type is finite_float)
    return _FLOAT_DESTS


def _refuse_idle_flags(args):
    """A flag that would change nothing is an error, not a silent exit 0."""
    if args.feats is None:
        for flag, given in (("num-classes", args.num_classes is not None),
                            ("cv-feats", args.cv_feats is not None),
                            ("cv-targets", args.cv_targets is not None),
                            ("splice", args.splice > 0),
                            ("no-cmvn", not args.cmvn)):
            if given:
                raise UsageError("--%s applies to Kaldi data (--feats/--targets); the default "
                                 "MNIST-1D data has 10 classes, its own held-out split and "
                                 "no frame context" % flag)
    elif (args.cv_feats is None) != (args.cv_targets is None):
        raise UsageError("--cv-feats and --cv-targets go together")
    elif args.cv_feats is None:
        # Kaldi data has no held-out set unless given: newbob would compare
        # NaN losses and reject every epoch, --cross-validate report nothing.
        if args.lr_schedule == "newbob":
            raise UsageError("--lr-schedule newbob needs a held-out set with Kaldi data: "
                             "give --cv-feats and --cv-targets")
        if args.cross_validate:
            raise UsageError("--cross-validate needs a held-out set with Kaldi data: "
                             "give --cv-feats and --cv-targets")
    if args.feature_transform:
        for flag, given in (("splice", args.splice > 0), ("no-cmvn", not args.cmvn)):
            if given:
                raise UsageError("--%s changes nothing with --feature-transform, which takes "
                                 "the place of psgd's splice and global CMVN" % flag)
    if args.warmup_epochs is not None and not args.lr_scaling:
        raise UsageError("--warmup-epochs ramps up to the scaled rate; --no-lr-scaling keeps "
                         "the one-worker rate")
    if args.bptt is not None and args.model != "lstm":
        raise UsageError("--bptt applies to --model lstm; the model is %s" % args.model)
    schedule = args.lr_schedule or DEFAULT_SCHEDULE
    for flag, kind in (("lr_decay", "exponential"), ("newbob_start", "newbob"),
                       ("newbob_end", "newbob"), ("newbob_factor", "newbob")):
        if getattr(args, flag) is not None and schedule != kind:
            raise UsageError("--%s applies to --lr-schedule %s; the schedule is %s" % (
                flag.replace("_", "-"), kind, schedule))
    if args.sync_bn and not args.model_parallel:
        raise UsageError("--sync-bn applies to --model-parallel only (data-parallel "
                         "algorithms average BatchNorm statistics at every sync already)")
    if args.binary is not None and not writes_nnet1(args.out):
        raise UsageError("--binary applies to a Kaldi nnet1 --out NAME.nnet; %s" % (
            "--out %s writes a psgd .npz" % args.out if args.out else "there is no --out"))
    if args.checkpoint_every is not None and not args.checkpoint_dir:
        raise UsageError("--checkpoint-every applies to --checkpoint-dir: without it no "
                         "checkpoint is written")


def algorithm_options(args, num_workers=None):
    """psgd.create keyword options from the flags the user gave, over the
    trainer's defaults for `num_workers` (by_n.options)."""
    cls = REGISTRY[args.algo]
    given = {option: getattr(args, flag) for flag, option in ALGORITHM_FLAGS.items()
             if getattr(args, flag) is not None and option in cls.OPTIONS}
    defaults = by_n.options(args.algo, num_workers, given) if num_workers else {}
    return {**defaults, **given}
