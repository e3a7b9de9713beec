"""What a rank leaves behind when its process ends: an algorithm object
that was never stopped (or a server that never ran) makes the other ranks
wait for ever in their next sync. At exit, each live object is asked:

  * a worker that exits cleanly without stop() is stopped here, with a
    warning: the collective algorithms' Allreduce sees n_k = 0 from it, a
    server algorithm's server its FINISHED, and the others go on;
  * a rank ended by an uncaught exception with its object not stopped ends
    the job (MPI Abort, exit 1) instead of leaving the others waiting;
  * a server that never called run() while its workers wait ends the job.

What cannot be seen from here (a rank alive but stuck elsewhere, a server
that never calls run() and never exits) is the stall watchdog's to report
(psgd.train.faults.Watchdog; the trainer runs one)."""
import atexit
import itertools
import os
import sys
import weakref

from mpi4py import MPI

from ..agreement import abort

_live = weakref.WeakSet()
_order = itertools.count()
_registered = []


def track(obj):
    """Watch `obj` (an Algorithm) until the process exits."""
    obj.created_at = next(_order)
    _live.add(obj)
    if not _registered:
        atexit.register(_at_exit)
        _registered.append(True)


def forget(obj):
    """`obj` is left behind (its job went on without some dead rank): no
    exit action, which would talk to ranks that are gone."""
    _live.discard(obj)


def forget_all():
    """Every rank failed together (a collective error) and exits: nobody
    waits for anybody, so nothing is to be stopped at exit."""
    _live.clear()


def _at_exit():
    if MPI.Is_finalized():
        return
    crashed = getattr(sys, "last_value", None) is not None
    rank = MPI.COMM_WORLD.Get_rank()
    # in creation order: every rank stops its objects in the same order
    for obj in sorted(_live, key=lambda o: o.created_at):
        action, what = obj.exit_action()
        if action is None:
            continue
        if action == "quiet-stop" and not crashed:
            obj.stop_at_exit()
            continue
        if action == "abort" or crashed:
            sys.stderr.write("psgd: rank %d: %s: ending the job, whose other ranks would wait "
                             "for ever\n" % (rank, what if action == "abort" else
                                             "an uncaught exception ended this rank with its "
                                             "%s algorithm not stopped" % obj.name))
            abort(1)
            os._exit(1)     # an Abort from an exit handler may return (MPICH)
        sys.stderr.write("psgd: warning: rank %d: %s; stopped at exit so that the other ranks "
                         "do not wait for it\n" % (rank, what))
        sys.stderr.flush()
        obj.stop_at_exit()
