"""The TCP socket buffers of MPI's connections between hosts, set before MPI
starts where PSGD_TCP_BUFFER asks for them (through the transports' own
variables, where the job sets none).

An MPI send over TCP completes once its bytes are in the socket, and the
kernel's autotuning lets a socket hold megabytes not yet sent: a server's
reply still had 1.4-1.8 MB queued (11-14 ms at 1 Gb/s) when the server
moved on, and a worker trading shards in turns waited that long before its
next turn, its outgoing direction idle meanwhile. 256 KiB buffers (the
kernel doubles what is asked) took asgd's two servers at 1 Gb/s from
0.83-0.84 to 0.89-0.91 of their links. Since then asgd's and masgd's turns
push when the server is READY, without waiting for the last reply
(server_worker.py), and then the kernel's buffers did better than 256 KiB;
on slower links behind a shallow queue small ones still pay (250 Mb/s,
5 ms: 64 KiB, the same 2 ms of the link, beat the kernel's).
One connection moves at most about twice the size per round trip, and at
10 Gb/s on the namespace cluster a single server's exchanges lost up to a
third in most runs: not the default (benchmarks/FINDINGS.md has the figures).

Too late where MPI started before psgd was imported (`from mpi4py import
MPI` first): then the job's own variables decide, and a PSGD_TCP_BUFFER the
user set is named as not taking effect (rank 0, one line)."""
import os
import sys

from . import settings

# UCX's TCP transport (MPICH's and Open MPI's UCX) and Open MPI's tcp BTL
VARIABLES = ("UCX_TCP_SNDBUF", "UCX_TCP_RCVBUF", "OMPI_MCA_btl_tcp_sndbuf",
             "OMPI_MCA_btl_tcp_rcvbuf")


def limit_tcp_buffers(environ=os.environ):
    """Set each variable the job left unset to PSGD_TCP_BUFFER's bytes;
    returns the names set (forget() them once MPI has started)."""
    size = settings.get("PSGD_TCP_BUFFER")
    if not size:
        return []
    chosen = [var for var in VARIABLES if var not in environ]
    for var in chosen:
        environ[var] = str(size)
    return chosen


def forget(names, environ=os.environ):
    """Take back what limit_tcp_buffers set, MPI having read it: a job this
    process launches decides its own (its PSGD_TCP_BUFFER included)."""
    for var in names:
        environ.pop(var, None)


def too_late(environ=os.environ):
    """The line saying PSGD_TCP_BUFFER, set by the user, came after MPI
    started (None where it is unset)."""
    if "PSGD_TCP_BUFFER" not in environ:
        return None
    return ("psgd: PSGD_TCP_BUFFER has no effect: MPI started before psgd was imported "
            "(import psgd before mpi4py's MPI, or set %s yourself)" % ", ".join(VARIABLES))


def warn_if_too_late():
    line = too_late()
    if line is not None:
        from mpi4py import MPI
        if not MPI.Is_initialized() or MPI.COMM_WORLD.Get_rank() == 0:
            print(line, file=sys.stderr, flush=True)
