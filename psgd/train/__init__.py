"""The trainer: `Trainer(args).run()`, with args from the CLI parser or
`make_config(**options)`."""
from .options import build_parser, make_config, parse_args
from .trainer import Trainer


def train(comm=None, **options):
    """Train from Python: `psgd.train.train(algo="bmuf", epochs=5)`; collective.
    Returns the last epoch's metrics row."""
    args = make_config(**options)
    if args.model_parallel:
        from .hybrid import HybridTrainer
        return HybridTrainer(args, comm).run()
    return Trainer(args, comm).run()


__all__ = ["Trainer", "build_parser", "make_config", "parse_args", "train"]
