"""Can a psgd job go on when a rank dies, without a restart? A server (rank
0) and workers; worker 2 SIGKILLs itself after 5 rounds. Part 1: the server
serves by point-to-point messages under MPI_ERRORS_RETURN, and on a failure
asks MPI which rank died (Comm.Get_failed, ULFM), acknowledges it
(Ack_failed) and serves on. Part 2: every survivor's collective fails; they
revoke the communicator and shrink it (Revoke, Shrink) and sum on. Each rank
prints what each call did; the findings are in benchmarks/FINDINGS.md.

    mpirun --with-ft ulfm -n 3 python benchmarks/ulfm_probe.py      # Open MPI
    mpiexec -disable-auto-cleanup -n 3 python benchmarks/ulfm_probe.py   # MPICH
"""
import os
import signal
import time

import numpy as np
from mpi4py import MPI

ROUNDS = 20
comm = MPI.COMM_WORLD.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
rank = comm.Get_rank()


def say(*words):
    print("rank %d:" % rank, *words, flush=True)


def error(exc):
    return exc.Get_error_string().split(":")[0]


def die_at(i):
    if rank == 2 and i == 5:
        os.kill(os.getpid(), signal.SIGKILL)


def serve():
    """Part 1 on rank 0: reply to every worker's round until each said done."""
    buf, status = np.zeros(4), MPI.Status()
    served, done, dead = 0, set(), set()
    while len(done | dead) < comm.Get_size() - 1:
        try:
            comm.Recv([buf, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=1, status=status)
        except MPI.Exception as exc:
            failed = comm.Get_failed()
            lost = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())),
                                             comm.Get_group())
            comm.Ack_failed()
            dead.update(lost)
            say("Recv: %s; Get_failed: ranks %s; Ack_failed: ok; serving on" % (
                error(exc), lost))
            continue
        if buf[0] < 0:
            done.add(status.Get_source())
            continue
        served += 1
        comm.Send([buf, MPI.DOUBLE], dest=status.Get_source(), tag=2)
    say("part 1: served %d rounds of the live workers" % served)


def work():
    buf = np.ones(4)
    for i in range(ROUNDS):
        die_at(i)
        comm.Send([buf, MPI.DOUBLE], dest=0, tag=1)
        comm.Recv([buf, MPI.DOUBLE], source=0, tag=2)
    buf[0] = -1
    comm.Send([buf, MPI.DOUBLE], dest=0, tag=1)


def sum_on():
    """Part 2 on every survivor: Allreduce; on a failure Revoke, Shrink, go on."""
    global comm
    one, total, i = np.ones(1), np.zeros(1), 0
    while i < ROUNDS:
        try:
            comm.Allreduce([one, MPI.DOUBLE], [total, MPI.DOUBLE], op=MPI.SUM)
        except MPI.Exception as exc:
            started = time.time()
            comm.Revoke()
            comm = comm.Shrink()
            comm.Set_errhandler(MPI.ERRORS_RETURN)
            say("Allreduce: %s; Revoke, Shrink: %d ranks left (%.3fs)" % (
                error(exc), comm.Get_size(), time.time() - started))
            continue
        i += 1
    say("part 2: summed %d rounds, last sum %g" % (i, total[0]))


if rank == 0:
    serve()
else:
    work()
sum_on()
