"""The trainer's configuration, resolved once: the validated flags (the CLI
or make_config, options.py) and the job's size give frozen sections, every
default that depends on the number of workers N chosen here (defaults.py)
and nowhere later. The Trainer and its parallel strategy read the
sections; nothing writes them.

A section's field is named after the flag it comes from and holds the
value the run uses (the flag's, or the default chosen for N). The flags as
given stay beside them (`Config.flags`): checkpoints record them and a
resumed run is compared with them by name (consistency.py, resize.py)."""
import argparse
import dataclasses
import types

from ..algorithms import REGISTRY
from ..nnet import momentum_option
from .defaults import (default_lr, default_sync_period, local_momentum, lr_rule_name, lr_scale,
                       warmup_epochs, work_shares)
from .options import algorithm_options
from .roles import server_count
from .schedule import DEFAULT as DEFAULT_SCHEDULE


@dataclasses.dataclass(frozen=True)
class Run:
    """Who does what, and for how long."""
    algo: str
    model_parallel: bool
    size: int               # ranks
    servers: int            # ranks 0..S-1 serve; 0 without a server algorithm
    num_workers: int        # N, what the defaults are chosen for
    work_shares: str        # each worker's examples per epoch: speed | equal (shares.py)
    epochs: int
    minibatch_size: int
    seed: int
    cross_validate: bool


@dataclasses.dataclass(frozen=True)
class Model:
    model: str              # as given: --init's file may hold another (the strategy knows)
    hidden: object
    channels: object
    lstm_cells: object
    dropout: object
    batchnorm: object
    bptt: int
    init: object
    sync_bn: bool

    def sizes(self):
        """The model flags given: build_model's keyword arguments."""
        return {k: getattr(self, k) for k in ("hidden", "channels", "lstm_cells", "dropout",
                                              "batchnorm") if getattr(self, k) is not None}


@dataclasses.dataclass(frozen=True)
class Data:
    num_samples: int
    feats: object
    targets: object
    cv_feats: object
    cv_targets: object
    splice: int
    cmvn: bool
    num_classes: object
    feature_transform: object


@dataclasses.dataclass(frozen=True)
class Optimizer:
    optimizer: str
    lr: float               # the rate after warm-up: the base rate times lr_scale
    lr_scale: float         # the large-batch rule's k (1: off)
    lr_rule: str
    warmup_epochs: int
    momentum: object        # --momentum, else the default for N, else None: the optimizer's own
    weight_decay: float
    clip: float

    def options(self):
        """create_optimizer's keyword options."""
        options = {"lr": self.lr, "weight_decay": self.weight_decay or None,
                   "clip": self.clip or None}
        if self.momentum is not None:
            options[momentum_option(self.optimizer)] = self.momentum
        return options


@dataclasses.dataclass(frozen=True)
class Schedule:
    lr_schedule: str
    lr_decay: float
    newbob_start: float
    newbob_end: float
    newbob_factor: float


@dataclasses.dataclass(frozen=True)
class Algorithm:
    sync_period: int        # samples between syncs
    options: types.MappingProxyType   # psgd.create's options: the flags given over N's defaults


@dataclasses.dataclass(frozen=True)
class Runtime:
    backend: object
    gpu_ids: object
    cuda_aware: object
    exchange: object


@dataclasses.dataclass(frozen=True)
class Outputs:
    out: object
    binary: bool
    metrics: object
    plot: object
    timeline: object
    checkpoint_dir: object
    checkpoint_every: int
    resume: bool
    progress: str
    quiet: bool


@dataclasses.dataclass(frozen=True)
class Faults:
    stall_timeout: float
    stall_abort: bool
    skip_nonfinite: bool


@dataclasses.dataclass(frozen=True)
class Config:
    run: Run
    model: Model
    data: Data
    optimizer: Optimizer
    schedule: Schedule
    algorithm: Algorithm
    runtime: Runtime
    outputs: Outputs
    faults: Faults
    flags: types.MappingProxyType     # dest -> value, as validated

    def namespace(self, **changes):
        """The flags as an argparse.Namespace (a copy), for what reads them
        by name: defaults.py's rules, the resume checks."""
        return argparse.Namespace(**dict(self.flags, **changes))


def resolve(args, size):
    """The Config of validated flags `args` (options.validate) for a job of
    `size` ranks; a UsageError when --servers leaves no worker. Pure: every
    rank resolves the same flags alike."""
    algorithm = REGISTRY[args.algo]
    servers = server_count(algorithm, args.servers, args.model_parallel, size)
    workers = size if args.model_parallel else algorithm.workers(size, max(servers, 1))
    scale = lr_scale(args, workers)
    base = args.lr if args.lr is not None else default_lr(args)
    options = algorithm_options(args, workers)
    chosen = {
        Run: dict(servers=servers, size=size, num_workers=workers,
                  work_shares=work_shares(args, algorithm, options)),
        Optimizer: dict(lr=base * scale, lr_scale=scale, lr_rule=lr_rule_name(args),
                        warmup_epochs=warmup_epochs(args), momentum=local_momentum(args, workers)),
        Schedule: dict(lr_schedule=args.lr_schedule or DEFAULT_SCHEDULE),
        Algorithm: dict(sync_period=args.sync_period or default_sync_period(args, workers),
                        options=types.MappingProxyType(options)),
    }
    flags = vars(args)
    sections = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "flags"}
    return Config(flags=types.MappingProxyType(dict(flags)), **{
        name: _section(kind, flags, chosen.get(kind, {})) for name, kind in sections.items()})


def _section(kind, flags, chosen):
    """A section: each field the value chosen for it, else its flag's."""
    return kind(**{f.name: chosen[f.name] if f.name in chosen else flags[f.name]
                   for f in dataclasses.fields(kind)})
