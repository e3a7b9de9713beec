"""The trainer: `Trainer(args).run()`, with args (validated flags) from the
CLI parser or `make_config(**options)`; the Trainer resolves them once for
the job's size into a frozen Config (config.py)."""
from .options import build_parser, make_config, parse_args
from .trainer import Trainer


def run(args, comm=None):
    """Train with validated `args` (CLI or make_config); collective. Returns
    the last epoch's metrics row."""
    if args.model_parallel:
        from .hybrid import HybridTrainer as kind
    else:
        kind = Trainer
    with kind(args, comm) as trainer:
        return trainer.run()


def train(comm=None, **options):
    """Train from Python: `psgd.train.train(algo="bmuf", epochs=5)`; collective."""
    return run(make_config(**options), comm)


__all__ = ["Trainer", "build_parser", "make_config", "parse_args", "run", "train"]
