"""The stall watchdog: a rank that stops arriving at syncs, or stops
answering altogether (frozen with SIGSTOP, swapped out, dead without MPI
noticing, on a host whose link is cut), is named with what it was last doing
and, when the job spans hosts, with its host.

Every rank's thread sends its status (a heartbeat) once a `period` on a
communicator of its own (like Horovod's stall check) to rank 0, which
collects them and sends its own to every rank: rank 1, its deputy, reports a
frozen rank 0, which cannot report itself, and any rank learns from rank 0's
silence that it is cut off from the job. A heartbeat's age (how long ago it
came) is what tells a silent rank from a waiting one: a frozen rank's last
status says "in sync 20" for ever, so the rank whose heartbeat is older than
the timeout is the one named, not the ones waiting for it.
"""
import math
import numbers
import os
import signal
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from .. import agreement, mpi, ulfm
from ..errors import UsageError
from ..protocol import TAG_WATCHDOG
from .stall_report import (COMPUTING, DONE, EPOCH_END, SERVING, SYNCING, WAITING,  # noqa: F401
                           Names, doing, slow_link, stall_report)

# phase, epoch, sync number, milliseconds in phase, rank, and a heartbeat
# count: rank 0 numbers its heartbeats, the others send back the last number
# they heard (how far behind they hear rank 0: a round trip over their link)
_STATUS = 6
# MPI_Abort from a rank that cannot reach the launcher never returns: the
# rank ends itself this long after calling it.
ABORT_GRACE_S = 5
# A rank that has not heard rank 0 for this many timeouts, the job not
# ended by then, is cut off from it and ends itself.
CUT_OFF = 1.5
NEVER = frozenset()     # the dead ranks of a watchdog that cannot lose any


def _seconds(what, value, off=False):
    """A duration > 0 in seconds (with `off`, None or 0 is None: no
    watchdog), or a UsageError: a negative or NaN one made every heartbeat
    look late and ended a healthy job, blaming rank 0."""
    if off and (value is None or (isinstance(value, numbers.Real) and value == 0)):
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value <= 0:
        raise UsageError("Watchdog: %s must be a finite number of seconds > 0%s, got %r"
                         % (what, " (None: no watchdog)" if off else "", value))
    return float(value)


class Watchdog:
    """While some rank waits (in a sync, at the end of an epoch, or serving
    as the server), rank 0 names the ranks that have not reached a sync for
    longer than `timeout` and what they were doing; a rank silent for longer
    than `timeout` is named before anything else (rank 0 by a rank on its
    host), and a host whose every rank is silent as that host. When no rank
    computes and workers have waited past `timeout`, the one not answering
    is the server, or (collective algorithms) nobody: every rank waits in
    MPI. With `abort`, the reporting rank ends the job (exit 3), and a rank
    that has heard nothing from rank 0 for 1.5 `timeout`, the job not ended
    by then, is cut off and ends itself. `hosts`: each rank's host (default:
    asked). No thread runs when timeout is None (or 0) or the job has one
    rank. Collective: a bad timeout or period on any rank, or timeouts that
    differ (a rank without a thread would be named as silent), fail on
    every rank."""

    def __init__(self, comm, timeout, abort=False, period=1.0, hosts=None, lossy=False):
        error = None
        try:
            timeout = _seconds("timeout", timeout, off=True)
            period = _seconds("period", period)
        except UsageError as exc:
            error = exc
        agreement.agree(comm, error)
        agreement.check_same(comm, {"timeout": timeout}, "the stall watchdog")
        self.timeout, self.abort = timeout, abort
        self.phase, self.epoch, self.sync_no, self.since = COMPUTING, 0, 0, time.time()
        self.thread = None
        if not timeout or comm.Get_size() < 2 or MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.hosts = hosts if hosts is not None else mpi.host_names(self.comm)
        self.names = Names(self.hosts)
        # rank 0's silence is reported by a rank on its host where there is
        # one: no link between them can make rank 0 look silent
        self.deputy = next((r for r in range(1, self.size) if self.hosts[r] == self.hosts[0]), 1)
        self.count = 0
        self.lossy, self.dead = lossy, set()
        self.period = min(period, timeout / 4)
        self.started = time.time()
        self.stopping = threading.Event()
        self.reported = None
        self.thread = threading.Thread(target=self._loop, name="psgd-watchdog", daemon=True)
        self.thread.start()

    def _set(self, phase, epoch, sync_no):
        # The thread may read a mix of old and new fields: its next read is whole.
        self.phase, self.epoch, self.sync_no, self.since = phase, epoch, sync_no, time.time()

    def enter(self, epoch, sync_no):
        """Waiting in sync `sync_no + 1` (for the other workers, or the server)."""
        self._set(SYNCING, epoch, sync_no)

    def serve(self, epoch, served):
        """The server's event loop: waiting for workers and serving them."""
        self._set(SERVING, epoch, served)

    def epoch_end(self, epoch):
        """The end-of-epoch collectives (evaluation, checkpoint): waiting for all."""
        self._set(EPOCH_END, epoch, self.sync_no)

    def leave(self):
        """Back to computing: after the sync just made, or in the next epoch."""
        phase, epoch, sync_no = self.phase, self.epoch, self.sync_no
        if phase == SYNCING:
            sync_no += 1
        elif phase == EPOCH_END:
            epoch += 1
        self._set(COMPUTING, epoch, sync_no)

    def _status(self):
        phase, epoch, sync_no, since = self.phase, self.epoch, self.sync_no, self.since
        return np.array([phase, epoch, sync_no, int(1000 * (time.time() - since)), self.rank,
                         self.count], dtype=np.int64)

    def _loop(self):
        try:
            if self.rank == 0:
                self._collect()
            else:
                self._beat()
        except MPI.Exception as exc:
            if not (self.lossy and ulfm.is_failure(exc)):
                raise
            # rank 0 died (its losses are counted, not raised): the main
            # thread meets the same failure and says so; this thread just ends

    # ranks 1..: send heartbeats, hear rank 0's -----------------------------------------
    def _beat(self):
        landing = np.zeros(_STATUS, dtype=np.int64)
        last = np.full(_STATUS, -1, dtype=np.int64)
        heard = time.time()
        request = self.comm.Irecv(landing, source=0, tag=TAG_WATCHDOG)
        sending = Sender(self.comm)
        while True:
            stopping = self.stopping.wait(self.period)
            while request != MPI.REQUEST_NULL and request.Test():
                last[:], heard, self.count = landing, time.time(), landing[5]
                request = MPI.REQUEST_NULL if landing[0] == DONE else \
                    self.comm.Irecv(landing, source=0, tag=TAG_WATCHDOG)
            status = self._status()
            if stopping:
                status[0] = DONE
            sending.send(status, 0)
            if stopping:
                sending.finish()
                while request != MPI.REQUEST_NULL:   # rank 0's goodbye
                    request.Wait()
                    request = MPI.REQUEST_NULL if landing[0] == DONE else \
                        self.comm.Irecv(landing, source=0, tag=TAG_WATCHDOG)
                return
            if request != MPI.REQUEST_NULL:
                self._hear_rank0(last, heard)

    def _hear_rank0(self, last, heard):
        age = time.time() - heard
        if age <= self.timeout:
            return
        if self.rank == self.deputy:
            across = self.hosts[self.rank] != self.hosts[0]
            self._say(("psgd: stall: %s silent for %.1fs (no heartbeat: %s), "
                       "last heard %s; noticed by %s" % (
                           self.names.rank(0), age, "frozen or dead, or the link between "
                           "%s and %s slow or cut?" % (self.hosts[0], self.hosts[self.rank])
                           if across else "frozen or dead?", doing(last, last[3] / 1000.0),
                           self.names.rank(self.rank))), ("silent", 0, heard))
        elif self.abort and age > CUT_OFF * self.timeout:
            # rank 0 would have ended the job by now, unless this rank cannot
            # hear it: nor could MPI_Abort reach the launcher from here
            sys.stderr.write("psgd: stall: %s has heard nothing from %s for %.1fs: cut off "
                             "from the job; --stall-abort ends this rank\n" % (
                                 self.names.rank(self.rank), self.names.rank(0), age))
            sys.stderr.flush()
            os._exit(3)

    # rank 0: collect, report, and beat for every rank -----------------------------------
    def _collect(self):
        table = np.full((self.size, _STATUS), -1, dtype=np.int64)
        seen_at = np.full(self.size, self.started)
        # One receive posted per rank, drained with Testsome: MPICH's Iprobe
        # let one message through per call and the table fell behind.
        landing = np.zeros((self.size, _STATUS), dtype=np.int64)
        requests = [MPI.REQUEST_NULL] + [self.comm.Irecv(landing[r], source=r, tag=TAG_WATCHDOG)
                                         for r in range(1, self.size)]
        sending = Sender(self.comm, self.dead if self.lossy else None)
        slow_said = set()
        last_round = time.time()
        while True:
            stopping = self.stopping.wait(self.period)
            now = time.time()
            # This process itself was stopped: the ages below are its own
            # silence, which the deputy has reported.
            was_frozen, last_round = now - last_round > self.timeout, now
            self.count += 1
            table[0], seen_at[0] = self._status(), now
            while True:
                done = self._arrived(requests, table)
                if not done:
                    break
                for r in done:
                    table[r], seen_at[r] = landing[r], time.time()
                    if landing[r, 0] != DONE:
                        requests[r] = self.comm.Irecv(landing[r], source=r, tag=TAG_WATCHDOG)
            if all(q == MPI.REQUEST_NULL for q in requests):
                break          # every other rank said goodbye
            if not stopping:
                for r in range(1, self.size):
                    sending.send(table[0], r)
                if not was_frozen:
                    line = stall_report(table, seen_at, time.time(), self.timeout,
                                        self.hosts, self.period)
                    self._say(*(line or (None, None)))
                    self._slow_links(self.count - table[:, 5], seen_at, slow_said)

        goodbye = self._status()
        goodbye[0] = DONE
        for r in range(1, self.size):
            sending.send(goodbye, r, wait=True)
        sending.finish()

    def _arrived(self, requests, table):
        """The ranks whose heartbeat came; under `lossy`, a rank whose
        process died is marked DONE (gone) and its heartbeats forgotten."""
        if not self.lossy:
            return MPI.Request.Testsome(requests) or []
        statuses = [MPI.Status() for _ in requests]
        done, failed = ulfm.testsome(requests, statuses)
        for r, _ in failed:
            self.dead.add(r)
            table[r, 0] = DONE
        return [r for r, _ in done]

    def _slow_links(self, behind, seen_at, said):
        """Name a host whose ranks hear rank 0 more than half the timeout
        behind while the other hosts' keep up (once per host): a report, not
        the end of the job."""
        line = slow_link(self.names, behind * self.period, self.timeout / 2, self.period,
                         heard=time.time() - seen_at < 1.25 * self.period)
        which = line.split(" (")[0]        # the hosts named, not how far behind
        if line and which not in said:
            said.add(which)
            sys.stderr.write("psgd: stall: %s\n" % line)
            sys.stderr.flush()

    def _say(self, line, key):
        if key == self.reported:
            return
        self.reported = key
        if not line:
            return
        sys.stderr.write(line + "\n")
        if self.abort:
            sys.stderr.write("psgd: stall: --stall-abort ends the job\n")
        sys.stderr.flush()
        if self.abort:
            # MPI_Abort needs the launcher; across a cut link it never returns,
            # holding the GIL: the kernel's alarm (SIGALRM's default action)
            # ends the process then
            signal.alarm(ABORT_GRACE_S)
            self.comm.Abort(3)

    def abandon(self, lost):
        """After the job lost ranks (`lost`: their numbers) and goes on
        without them: end the thread, with no collective over the ranks
        that are gone (this communicator is left behind)."""
        if self.thread is not None:
            self.dead.update(lost)
            self.stopping.set()
            self.thread.join()
            self.thread = None

    def close(self):
        """Collective in effect: every rank's thread says goodbye to rank 0's
        and rank 0's to every rank's."""
        if self.thread is not None:
            self.stopping.set()
            self.thread.join()
            self.comm.Barrier()
            self.comm.Free()
            self.thread = None


class Sender:
    """Heartbeats that never block the watchdog: one in flight per peer (a
    peer across a cut link would otherwise stall the sender), each from a
    buffer of its own."""

    def __init__(self, comm, dead=None):
        """`dead`: the set of ranks known dead (a lossy Watchdog's), to
        which sends are skipped and which a failed send adds to."""
        self.comm, self.pending = comm, {}
        self.dead = NEVER if dead is None else dead

    def send(self, status, dest, wait=False):
        if dest in self.dead:
            return
        request, _ = self.pending.get(dest, (MPI.REQUEST_NULL, None))
        try:
            if wait:
                request.Wait()
            elif not request.Test():
                return            # the last one has not left yet: skip this beat
        except MPI.Exception as exc:
            if self.dead is NEVER or not ulfm.is_failure(exc):
                raise
            self.dead.add(dest)
            del self.pending[dest]
            return
        data = status.copy()
        self.pending[dest] = (self.comm.Isend(data, dest=dest, tag=TAG_WATCHDOG), data)

    def finish(self):
        for dest, (request, _) in list(self.pending.items()):
            try:
                request.Wait()
            except MPI.Exception as exc:
                if self.dead is NEVER or not ulfm.is_failure(exc):
                    raise
                self.dead.add(dest)
        self.pending.clear()
