"""What psgd uses of ULFM, MPI's user-level failure mitigation (MPI 4's
fault-tolerance proposal, wrapped by mpi4py as Comm.Get_failed, Ack_failed,
Agree, Shrink): a server that goes on when a worker's process dies.

Of the MPIs psgd installs only Open MPI has it, and only in a job its
launcher started with `mpirun --with-ft ulfm` (which sets
OMPI_MCA_mpi_ft_enable=1 in every rank); without it the launcher ends the
whole job when one rank dies. The mpich wheel's ch4 device has none
(MPIR_CVAR_ENABLE_FT=1 fails inside MPI_Init). benchmarks/FINDINGS.md has
what each call did."""
import os
import time

import numpy as np
from mpi4py import MPI

# The error classes that mean "a process of this communicator has died"
FAILURES = tuple(getattr(MPI, name) for name in (
    "ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED") if hasattr(MPI, name))
LAUNCH = "Open MPI's `mpirun --with-ft ulfm`"


def enabled():
    """Whether this job's MPI can survive a rank's death."""
    return bool(FAILURES) and hasattr(MPI.Comm, "Shrink") and \
        os.environ.get("OMPI_MCA_mpi_ft_enable", "").lower() in ("1", "true", "yes")


def missing():
    """Why this job cannot survive a rank's death, or None."""
    if enabled():
        return None
    if "Open MPI" not in MPI.Get_library_version():
        return ("this MPI (%s) has no fault tolerance: it needs %s"
                % (" ".join(MPI.Get_library_version().split("\n")[0].split()), LAUNCH))
    return "this job was not started with fault tolerance: start it with %s" % LAUNCH


def is_failure(exc):
    """Whether MPI raised `exc` because a process died."""
    return isinstance(exc, MPI.Exception) and exc.Get_error_class() in FAILURES


def failed_on(exc, comm):
    """Whether `exc` (raised by a call on `comm`) comes from a dead process:
    a failure itself, or a failure inside a Waitall's or Testall's
    statuses (MPI_ERR_IN_STATUS) while `comm` has a dead rank."""
    if is_failure(exc):
        return True
    return isinstance(exc, MPI.Exception) and \
        exc.Get_error_class() in (MPI.ERR_IN_STATUS, MPI.ERR_PENDING) and bool(failed_ranks(comm))


def failure_string(exc):
    """The MPI's words for a failure: a Waitall's MPI_ERR_IN_STATUS says
    only "error code in status", so that one is told as the failure it
    stands for."""
    return exc.Get_error_string() if is_failure(exc) else \
        MPI.Get_error_string(MPI.ERR_PROC_FAILED)


def failed_ranks(comm):
    """The ranks of `comm` known to have died, acknowledged (so that the
    same failure is not raised again by wildcard receives), sorted."""
    comm.Ack_failed()
    group, mine = comm.Get_failed(), comm.Get_group()
    try:
        return sorted(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), mine))
    finally:
        group.Free()
        mine.Free()


def shrink(comm):
    """Collective over the live ranks: (a communicator of them, in the same
    order; the ranks of `comm` not in it), the same on every live rank."""
    survivors = comm.Shrink()
    old, new = comm.Get_group(), survivors.Get_group()
    try:
        kept = MPI.Group.Translate_ranks(old, list(range(old.Get_size())), new)
        return survivors, [r for r, k in enumerate(kept) if k == MPI.UNDEFINED]
    finally:
        old.Free()
        new.Free()


def testsome(requests, statuses):
    """MPI.Request.Testsome that tells a completed receive from a failed
    one: (done, failed), each a list of (index, status). Each request is
    tested alone: a Testsome that meets a failure raises MPI_ERR_IN_STATUS
    with the good requests it completed freed too, and which status is
    whose is then the library's choice."""
    done, failed = [], []
    for j, request in enumerate(requests):
        if request == MPI.REQUEST_NULL:
            continue
        status = statuses[len(done)]
        try:
            if request.Test(status):
                done.append((j, status))
        except MPI.Exception as exc:
            if not is_failure(exc):
                raise
            requests[j] = MPI.REQUEST_NULL      # its sender is gone: nothing will match it
            failed.append((j, status))
    return done, failed


def agree_none_lost(comm, lost_here, deadline_s=None):
    """Collective over the live ranks of `comm`, even with dead ones: True
    when no rank knows of a death (`lost_here`: this rank does) and MPI
    reports none. Agree's outcome is uniform: every live rank returns the
    same value, or every one raises the failure. With `deadline_s`, a
    TimeoutError when it has not completed by then: it waits on the MPI
    library's failure notices, which never come if the launcher's daemon
    of a host died with its ranks (seen once in six runs on namespace hosts
    when both ranks of a host were killed at once)."""
    flag = np.array([0 if lost_here else 1], dtype=np.intc)
    request = comm.Iagree(flag)
    end = None if deadline_s is None else time.monotonic() + deadline_s
    try:
        while not request.Test():
            if end is not None and time.monotonic() > end:
                raise TimeoutError("the live ranks did not agree on a lost rank within %gs" %
                                   deadline_s)
            time.sleep(1e-3)
    except MPI.Exception as exc:
        if not is_failure(exc):
            raise
        return False
    return bool(flag[0])
