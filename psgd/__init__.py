"""psgd: parallel SGD over MPI (bsp, bmuf, sod, syncgrad, easgd, asgd, masgd).

    import psgd
    sync = psgd.create("bmuf", params)        # collective over MPI.COMM_WORLD
    ...train params for a block of n_k samples...
    sync.synchronize(n_k)
    sync.stop(n_k_last)
"""
import sys

from ._threads import limit_blas_threads

limit_blas_threads()  # before NumPy is imported below
if "mpi4py.MPI" not in sys.modules:
    from ._cuda_first import initialize
    initialize()      # before mpi4py starts MPI below (Open MPI 5's CUDA support)

from .algorithms import ALGORITHMS, create  # noqa: E402
from .errors import UsageError  # noqa: E402

__all__ = ["ALGORITHMS", "create", "UsageError"]
__version__ = "0.1.0"
