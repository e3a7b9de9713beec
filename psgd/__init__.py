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
_tcp_set = []
if "mpi4py.MPI" not in sys.modules:    # before mpi4py starts MPI below
    from ._cuda_first import initialize
    from ._tcp_buffers import limit_tcp_buffers
    initialize()      # Open MPI 5's CUDA support
    _tcp_set = limit_tcp_buffers()
else:
    from ._tcp_buffers import warn_if_too_late
    warn_if_too_late()

from .algorithms import ALGORITHMS, create  # noqa: E402
from .errors import UsageError  # noqa: E402
from ._tcp_buffers import forget  # noqa: E402

forget(_tcp_set)      # MPI has started

__all__ = ["ALGORITHMS", "create", "UsageError"]
__version__ = "0.1.0"
