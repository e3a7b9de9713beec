"""The synchronization algorithms of ALGORITHMS.md, one module each."""
from .base import REGISTRY, Algorithm, create
from . import bsp, bmuf, sod, syncgrad, easgd, asgd, masgd  # noqa: F401  (each registers itself)

ALGORITHMS = tuple(REGISTRY)
