"""`mpirun -np N python -m psgd.worker --algo ALGO [options]` (also `psgd-train`).

Rank 0 is the server for easgd/asgd/masgd and a worker otherwise. Bad input
is one line and a non-zero exit on every rank; any other failure on any
rank names the rank and aborts the whole job instead of hanging it."""
import os
import sys
import warnings

from mpi4py import MPI

from . import agreement
from .algorithms import lifecycle
from .atomic import WriteError
from .errors import NonFiniteError, UsageError, is_collective
from .train import parse_args, run, survival

PROG = "psgd-train"


def _one_line_warnings(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write("%s: warning: rank %d: %s\n" % (PROG, MPI.COMM_WORLD.Get_rank(), message))


def alone_in_slurm(size):
    """The one line for a 1-rank trainer that SLURM started as one of several
    tasks, or None. srun under MpiDefault=none (SLURM's own default) starts
    every task as a job of its own: N trainers that then fight over one
    output folder."""
    if size != 1:
        return None
    step = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if step.isdigit() and int(step) > 1:
        return ("this trainer is a job of 1 rank, but its SLURM step has %s tasks: srun started "
                "them as separate jobs (the site's MpiDefault is none?); launch with "
                "`srun --mpi=pmi2` (MPICH) or mpirun, as bin/psgd-slurm.sbatch does" % step)
    tasks = os.environ.get("SLURM_NTASKS", "")
    if tasks.isdigit() and int(tasks) > 1:
        warnings.warn("this trainer is a job of 1 rank in a SLURM allocation of %s tasks: "
                      "start it with srun or mpirun to use them" % tasks)
    return None


def main(argv=None):
    code = _main(argv)
    if survival.LOST:
        # Open MPI's MPI_Finalize waits for ever for ranks that died (its
        # PMIx fence), whether the job then ends well or with an error that
        # every live rank has said: its lines and files are all out
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _main(argv):
    agreement.abort_on_error()
    warnings.showwarning = _one_line_warnings
    alone = alone_in_slurm(MPI.COMM_WORLD.Get_size())
    if alone:
        sys.stderr.write("%s: error: %s\n" % (PROG, alone))
        return 2
    try:
        args = parse_args(argv)
    except UsageError as exc:
        # Every rank parses the same command line, so every rank fails here.
        sys.stderr.write("%s: error: %s\n" % (PROG, exc))
        return 2
    try:
        run(args)
    except (UsageError, NonFiniteError, WriteError) as exc:
        if is_collective(exc):
            lifecycle.forget_all()
            sys.stderr.write("%s: error: %s\n" % (PROG, exc))
            sys.stderr.flush()
            return 2
        # Only this rank knows: say so and take the job down with it.
        sys.stderr.write("%s: error: rank %d: %s\n" % (PROG, MPI.COMM_WORLD.Get_rank(), exc))
        agreement.abort(2)
    except KeyboardInterrupt:
        MPI.COMM_WORLD.Abort(130)
    return 0


if __name__ == "__main__":
    sys.exit(main())
