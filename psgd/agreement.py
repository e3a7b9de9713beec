"""Collective agreement: every rank raises the same error when any rank has
one (agree), layouts are the same on every rank (check_same), and an uncaught
exception ends the whole job with one line instead of hanging it
(abort_on_error). Only int64 flags, hashes and UTF-8 text cross the wire."""
import array
import fcntl
import hashlib
import json
import os
import stat
import sys
import termios
import time

import numpy as np
from mpi4py import MPI

from . import settings
from .errors import (Collective, CollectiveError, CollectiveUsageError, ServerDiedError,
                     UsageError)
from .protocol import TAG_SAID


# Agreement: errors and layouts -------------------------------------------------
def broadcast_bytes(comm, raw, root):
    """Collective: `root`'s bytes (given there, None elsewhere) on every rank."""
    raw = np.frombuffer(raw, dtype=np.uint8) if comm.rank == root else None
    length = np.array([0 if raw is None else raw.size], dtype=np.int64)
    comm.Bcast([length, MPI.INT64_T], root=root)
    buf = raw.copy() if raw is not None else np.empty(int(length[0]), dtype=np.uint8)
    comm.Bcast([buf, MPI.BYTE], root=root)
    return buf.tobytes()


def _bcast_text(comm, text, root):
    return broadcast_bytes(comm, text.encode("utf-8") if comm.rank == root else None,
                           root).decode("utf-8")


def agree(comm, error):
    """Collective: if any rank has an `error`, every rank raises. The text is
    the lowest failing rank's (named unless every rank failed), so all ranks
    report the same line. A UsageError becomes a CollectiveUsageError, any
    other error a CollectiveError (the failing rank's own as its cause)."""
    flags = np.array([comm.size if error is None else comm.rank, error is not None],
                     dtype=np.int64)
    first = np.empty(1, dtype=np.int64)
    failed = np.empty(1, dtype=np.int64)
    comm.Allreduce([flags[:1], MPI.INT64_T], [first, MPI.INT64_T], op=MPI.MIN)
    comm.Allreduce([flags[1:], MPI.INT64_T], [failed, MPI.INT64_T], op=MPI.SUM)
    first, failed = int(first[0]), int(failed[0])
    if first == comm.size:
        return
    usage = isinstance(error, UsageError)
    text = _bcast_text(comm, ("U" if usage else "E") + str(error) if comm.rank == first else "",
                       first)
    kind, text = (CollectiveUsageError if text[0] == "U" else CollectiveError), text[1:]
    if failed < comm.size:
        text = "rank %d: %s" % (first, text)
    # Every rank raises it: no rank is left waiting. The failing rank keeps
    # its own exception as the cause (and its traceback).
    raise kind(text) from (error if comm.rank == first and not usage else None)


def check_same(comm, description, what="layout"):
    """Collective: raise UsageError on every rank unless `description` (a
    JSON-able dict) is identical on all ranks; the message names the ranks and
    the first difference. Only hashes and UTF-8 JSON cross the wire."""
    text = json.dumps(description, sort_keys=False)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], dtype=np.int64).copy()
    digests = np.empty(comm.size, dtype=np.int64)
    comm.Allgather([digest, MPI.INT64_T], [digests, MPI.INT64_T])
    odd = [r for r in range(comm.size) if digests[r] != digests[0]]
    if not odd:
        return
    other = odd[0]
    mine = _bcast_text(comm, text, 0)
    theirs = _bcast_text(comm, text, other)
    diff = first_difference(json.loads(mine), json.loads(theirs))
    raise CollectiveUsageError("%s differs between rank 0 and rank%s %s: %s" % (
        what, "s" if len(odd) > 1 else "", ",".join(map(str, odd)), diff))


def first_difference(a, b, path=""):
    """A short text naming where two JSON values first differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return "%s%s present on one side only" % (path, key)
            d = first_difference(a[key], b[key], "%s%s." % (path, key))
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "%s has %d entries vs %d" % (path.rstrip(".") or "value", len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s%d." % (path, i))
            if d:
                return d
        return None
    if a != b:
        return "%s %r vs %r" % (path.rstrip(".") or "value", a, b)
    return None


# Abort on error ----------------------------------------------------------------
ABORT_GRACE = 1.0   # seconds: the most a failing rank waits before it ends the job
FORWARDED = 0.05    # seconds: a line read on another host reaching the launcher
_SAID = np.ones(1, dtype=np.int64)


def abort_on_error(comm=None):
    """Make an uncaught exception on any rank print one line naming the rank
    and end the whole job (MPI_Abort) instead of hanging the other ranks."""
    comm = comm if comm is not None else MPI.COMM_WORLD
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
        elif issubclass(kind, (UsageError, CollectiveError)):
            sys.stderr.write("psgd: error: %s\n" % value)
        elif issubclass(kind, ServerDiedError):     # no fault of this rank's
            sys.stderr.write("psgd: error: rank %d: %s\n" % (comm.rank, value))
            end(1)          # every worker knows: no Abort (errors.ServerDiedError)
        else:
            if settings.get("PSGD_TRACEBACK"):
                previous(kind, value, tb)
            sys.stderr.write("psgd: rank %d failed: %s: %s\n" % (comm.rank, kind.__name__, value))
        abort(1, comm, everyone=issubclass(kind, Collective))

    sys.excepthook = hook
    return hook


def abort(code, comm=None, everyone=False):
    """End the whole job with exit status `code` once this rank's last line
    has reached the launcher. everyone: every rank of `comm` raised the same
    error and ends through here; rank 0 then ends the job as soon as every
    rank's line is out, not after the whole ABORT_GRACE."""
    comm = comm if comm is not None else MPI.COMM_WORLD
    deadline = time.monotonic() + ABORT_GRACE
    # The launcher forwards a rank's output asynchronously: an immediate
    # MPI_Abort lost this rank's own line on a loaded machine. Where every
    # rank fails, the rank that knows why must also have said it before
    # another rank's Abort takes the job down.
    if _line_out(deadline) and everyone and _every_line_out(comm, deadline):
        time.sleep(FORWARDED)
        comm.Abort(code)
    time.sleep(max(0.0, deadline - time.monotonic()))
    comm.Abort(code)


def _line_out(deadline):
    """Wait (until `deadline`) for this rank's stderr to be read by whoever
    reads it: a pipe (the launcher's, on this host) is empty, a file takes
    a write at once. False where that cannot be known (a terminal or a pty,
    whose reader may lag too; a socket)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        fd = sys.stderr.fileno()
        mode = os.fstat(fd).st_mode
        if not stat.S_ISFIFO(mode):
            return stat.S_ISREG(mode)
        unread = array.array("i", [0])
        while time.monotonic() < deadline:
            fcntl.ioctl(fd, termios.FIONREAD, unread)
            if unread[0] == 0:
                return True
            time.sleep(0.002)
    except (OSError, ValueError, AttributeError):
        pass
    return False


def _every_line_out(comm, deadline):
    """Rank 0: whether every other rank said (TAG_SAID) that its line is
    out, by `deadline`. The others say so and return False: they wait out
    the grace, and rank 0's Abort ends them first."""
    try:
        if comm.rank != 0:
            comm.Isend([_SAID, MPI.INT64_T], dest=0, tag=TAG_SAID)
            return False
        said = np.zeros(comm.size, dtype=np.int64)
        requests = [comm.Irecv([said[r:r + 1], MPI.INT64_T], source=r, tag=TAG_SAID)
                    for r in range(1, comm.size)]
        while time.monotonic() < deadline:
            if MPI.Request.Testall(requests):
                return True
            time.sleep(0.002)
    except MPI.Exception:
        pass
    return False


def end(code):
    """End this rank alone, with exit status `code`, where every other rank
    ends itself too: the grace lets the others say why before the launcher
    takes the first non-zero exit for the job's and ends them."""
    sys.stderr.flush()
    time.sleep(ABORT_GRACE)
    os._exit(code)
