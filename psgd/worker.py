"""`mpirun -np N python -m psgd.worker --algo ALGO [options]` (also `psgd-train`).

Rank 0 is the server for easgd/asgd/masgd and a worker otherwise. Bad input
is one line and a non-zero exit on every rank; any other failure on any
rank names the rank and aborts the whole job instead of hanging it."""
import sys
import warnings

from mpi4py import MPI

from . import agreement
from .algorithms import lifecycle
from .errors import NonFiniteError, UsageError, is_collective
from .train import parse_args, run

PROG = "psgd-train"


def _one_line_warnings(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write("%s: warning: rank %d: %s\n" % (PROG, MPI.COMM_WORLD.Get_rank(), message))


def main(argv=None):
    agreement.abort_on_error()
    warnings.showwarning = _one_line_warnings
    try:
        args = parse_args(argv)
    except UsageError as exc:
        # Every rank parses the same command line, so every rank fails here.
        sys.stderr.write("%s: error: %s\n" % (PROG, exc))
        return 2
    try:
        run(args)
    except (UsageError, NonFiniteError) as exc:
        if is_collective(exc):
            lifecycle.forget_all()
            sys.stderr.write("%s: error: %s\n" % (PROG, exc))
            sys.stderr.flush()
            return 2
        # Only this rank knows: say so and take the job down with it.
        sys.stderr.write("%s: error: rank %d: %s\n" % (PROG, MPI.COMM_WORLD.Get_rank(), exc))
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(2)
    except KeyboardInterrupt:
        MPI.COMM_WORLD.Abort(130)
    return 0


if __name__ == "__main__":
    sys.exit(main())
