"""The trainer: `Trainer(args).run()`, with args from the CLI parser or
`make_config(**options)`."""
from .options import build_parser, make_config, parse_args
from .trainer import Trainer


def train(comm=None, **options):
    """Train from Python: `psgd.train.train(algo="bmuf", epochs=5)`; collective."""
    return Trainer(make_config(**options), comm).run()


__all__ = ["Trainer", "build_parser", "make_config", "parse_args", "train"]
