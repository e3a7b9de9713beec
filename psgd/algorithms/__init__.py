"""The synchronization algorithms of docs/algorithms.md, one module each. Each
module registers itself on import; the import order is the order users see
(collective algorithms first, then the server ones)."""
from .base import REGISTRY, Algorithm
from .factory import create
from . import bsp, bmuf, sod, syncgrad  # noqa: F401,E402  (order matters, see above)
from . import easgd, asgd, masgd  # noqa: F401,E402

ALGORITHMS = tuple(REGISTRY)

__all__ = ["ALGORITHMS", "REGISTRY", "Algorithm", "create"]
