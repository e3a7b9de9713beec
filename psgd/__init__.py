"""psgd: parallel SGD over MPI (bsp, bmuf, sod, syncgrad, easgd, asgd, masgd).

    import psgd
    sync = psgd.create("bmuf", params)        # collective over MPI.COMM_WORLD
    ...train params for a block of n_k samples...
    sync.synchronize(n_k)
    sync.stop(n_k_last)
"""
from .algorithms import ALGORITHMS, create
from .errors import UsageError

__all__ = ["ALGORITHMS", "create", "UsageError"]
__version__ = "0.1.0"
