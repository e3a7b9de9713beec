"""The trainer: `Trainer(args).run()`, with args (validated flags) from the
CLI parser or `make_config(**options)`; the Trainer resolves them once for
the job's size into a frozen Config (config.py)."""
from .options import build_parser, make_config, parse_args
from .survival import WorkersLost
from .trainer import Trainer


def run(args, comm=None):
    """Train with validated `args` (CLI or make_config); collective. Returns
    the last epoch's metrics row. A job that survives workers' deaths
    (--survive-worker-loss) goes on here in a new Trainer over the live ranks."""
    if args.model_parallel:
        from .hybrid import HybridTrainer as kind
    else:
        kind = Trainer
    handoff = None
    while True:
        with kind(args, comm, handoff) as trainer:
            try:
                return trainer.run()
            except WorkersLost as lost:
                handoff = lost.handoff
                trainer.abandon(handoff.lost)
                comm = handoff.comm


def train(comm=None, **options):
    """Train from Python: `psgd.train.train(algo="bmuf", epochs=5)`; collective."""
    return run(make_config(**options), comm)


__all__ = ["Trainer", "build_parser", "make_config", "parse_args", "run", "train"]
