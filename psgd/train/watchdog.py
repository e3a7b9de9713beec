"""The stall watchdog: a rank that stops arriving at syncs, or stops
answering altogether (frozen with SIGSTOP, swapped out, dead without MPI
noticing), is named with what it was last doing.

Every rank's thread sends its status (a heartbeat) once a `period` on a
communicator of its own (like Horovod's stall check): ranks 1.. to rank 0,
which collects them, and rank 0 to rank 1, its deputy, because a frozen
rank 0 cannot report itself. A heartbeat's age (how long ago it came) is
what tells a silent rank from a waiting one: a frozen rank's last status
says "in sync 20" for ever, so the rank whose heartbeat is older than the
timeout is the one named, not the ones waiting for it.
"""
import math
import numbers
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from .. import agreement
from ..errors import UsageError

COMPUTING, SYNCING, DONE, SERVING, EPOCH_END = 0, 1, 2, 3, 4
WAITING = (SYNCING, SERVING, EPOCH_END)
_STATUS = 5  # phase, epoch, sync number, milliseconds in phase, rank
_TAG = 7
DEPUTY = 1   # the rank that watches rank 0's heartbeats


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
    than `timeout` is named before anything else (rank 0 by rank 1). When no
    rank computes and workers have waited past `timeout`, the one not
    answering is the server, or (collective algorithms) nobody: every rank
    waits in MPI. With `abort`, the reporting rank ends the job (exit 3). No
    thread runs when timeout is None (or 0) or the job has one rank.
    Collective: a bad timeout or period on any rank, or timeouts that differ
    (a rank without a thread would be named as silent), fail on every rank."""

    def __init__(self, comm, timeout, abort=False, period=1.0):
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
        return np.array([phase, epoch, sync_no, int(1000 * (time.time() - since)), self.rank],
                        dtype=np.int64)

    def _loop(self):
        if self.rank == 0:
            self._collect()
        else:
            self._beat()

    # ranks 1..: send heartbeats; rank 1 also watches rank 0's -----------------------
    def _beat(self):
        deputy = self.rank == DEPUTY
        if deputy:
            landing = np.zeros(_STATUS, dtype=np.int64)
            last = np.full(_STATUS, -1, dtype=np.int64)
            heard = time.time()
            request = self.comm.Irecv(landing, source=0, tag=_TAG)
        while True:
            stopping = self.stopping.wait(self.period)
            status = self._status()
            if stopping:
                status[0] = DONE
            self.comm.Send(status, dest=0, tag=_TAG)
            if deputy:
                while request != MPI.REQUEST_NULL and request.Test():
                    last[:], heard = landing, time.time()
                    request = MPI.REQUEST_NULL if landing[0] == DONE else \
                        self.comm.Irecv(landing, source=0, tag=_TAG)
                if stopping:
                    while request != MPI.REQUEST_NULL:   # rank 0's goodbye
                        request.Wait()
                        request = MPI.REQUEST_NULL if landing[0] == DONE else \
                            self.comm.Irecv(landing, source=0, tag=_TAG)
                elif request != MPI.REQUEST_NULL:
                    self._watch_rank0(last, heard)
            if stopping:
                return

    def _watch_rank0(self, last, heard):
        age = time.time() - heard
        if age <= self.timeout:
            return
        self._say(("psgd: stall: rank 0 silent for %.1fs (no heartbeat: frozen or dead?), "
                   "last heard %s; noticed by rank %d" % (
                       age, _doing(last, last[3] / 1000.0), self.rank)), ("silent", 0, heard))

    # rank 0: collect, report, and beat for the deputy ----------------------------------
    def _collect(self):
        table = np.full((self.size, _STATUS), -1, dtype=np.int64)
        seen_at = np.zeros(self.size)
        # One receive posted per rank, drained with Testsome: MPICH's Iprobe
        # let one message through per call and the table fell behind.
        landing = np.zeros((self.size, _STATUS), dtype=np.int64)
        requests = [MPI.REQUEST_NULL] + [self.comm.Irecv(landing[r], source=r, tag=_TAG)
                                         for r in range(1, self.size)]
        last_round = time.time()
        while True:
            stopping = self.stopping.wait(self.period)
            now = time.time()
            # This process itself was stopped: the ages below are its own
            # silence, which the deputy has reported.
            was_frozen, last_round = now - last_round > self.timeout, now
            table[0], seen_at[0] = self._status(), now
            while True:
                done = MPI.Request.Testsome(requests)
                if not done:
                    break
                for r in done:
                    table[r], seen_at[r] = landing[r], time.time()
                    if landing[r, 0] != DONE:
                        requests[r] = self.comm.Irecv(landing[r], source=r, tag=_TAG)
            if all(q == MPI.REQUEST_NULL for q in requests):
                break          # every other rank said goodbye
            if not stopping:
                self.comm.Send(table[0], dest=DEPUTY, tag=_TAG)
                if not was_frozen:
                    line = stall_report(table, seen_at, time.time(), self.timeout,
                                        time.time() - self.started)
                    self._say(*(line or (None, None)))
        goodbye = self._status()
        goodbye[0] = DONE
        self.comm.Send(goodbye, dest=DEPUTY, tag=_TAG)

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
            self.comm.Abort(3)

    def close(self):
        """Collective in effect: every rank's thread says goodbye to rank 0's
        (and rank 0's to rank 1's)."""
        if self.thread is not None:
            self.stopping.set()
            self.thread.join()
            self.comm.Barrier()
            self.comm.Free()
            self.thread = None


def stall_report(table, seen_at, now, timeout, running):
    """(line, key) naming the ranks that hold the job up, or None. `table`:
    each rank's last status (phase -1: none yet), `seen_at` when it came,
    `running`: seconds the watchdog has run."""
    size = len(table)
    phase = table[:, 0]
    age = now - seen_at
    elapsed = table[:, 3] / 1000.0 + age
    silent = [r for r in range(1, size) if phase[r] >= 0 and phase[r] != DONE
              and age[r] > timeout]
    if silent:
        others = [_describe(r, table[r], elapsed[r]) for r in range(size)
                  if r not in silent and phase[r] != DONE]
        line = "psgd: stall: silent for more than %gs (no heartbeat: frozen or dead?): %s%s" % (
            timeout, ", ".join("rank %d (last heard %.1fs ago: %s)" % (
                r, age[r], _doing(table[r], elapsed[r] - age[r]))
                for r in silent), "; others: " + ", ".join(others) if others else "")
        return line, ("silent",) + tuple(silent)
    waiting = [r for r in range(size) if phase[r] in WAITING]
    if not waiting:
        return None
    late = [r for r in range(size) if (phase[r] == COMPUTING and elapsed[r] > timeout)
            or (phase[r] < 0 and running > timeout)]
    stuck = [r for r in waiting if phase[r] == SYNCING and elapsed[r] > timeout]
    serving = [r for r in range(size) if phase[r] == SERVING]   # ranks 0..S-1 under --servers S
    if not late and stuck and all(phase[r] in WAITING for r in range(size)):
        if serving:
            # Every worker waits and the servers have been asked: one of them is it.
            late = serving
            for r in serving:
                waiting.remove(r)
        elif all(elapsed[r] > timeout for r in range(size)):
            line = "psgd: stall: every rank has waited for more than %gs (stuck in MPI?): %s" % (
                timeout, ", ".join(_describe(r, table[r], elapsed[r]) for r in range(size)))
            return line, ("all",) + tuple(int(table[r, 2]) for r in stuck)
    if not late:
        return None
    if late and late == serving:
        what = ["rank %d (%s server, epoch %d: no answer for %.1fs)" % (
            r, "the" if late == [0] else "a", table[r, 1] + 1, max(elapsed[w] for w in stuck))
            for r in late]
    else:
        what = [_describe(r, table[r], elapsed[r]) for r in late]
    line = "psgd: stall: not arrived after %gs: %s; waiting: %s" % (
        timeout, ", ".join(what), ", ".join(_describe(r, table[r], elapsed[r]) for r in waiting))
    return line, tuple((r, int(table[r, 0]), int(table[r, 1]), int(table[r, 2])) for r in late)


def _describe(r, status, elapsed):
    return "rank %d (%s)" % (r, _doing(status, elapsed))


def _doing(status, elapsed):
    phase, epoch, sync_no = int(status[0]), int(status[1]) + 1, int(status[2])
    if phase < 0:
        return "never reported"
    if phase == COMPUTING:
        return "computing for %.1fs in epoch %d, after sync %d" % (elapsed, epoch, sync_no)
    if phase == SYNCING:
        return "in sync %d of epoch %d for %.1fs" % (sync_no + 1, epoch, elapsed)
    if phase == SERVING:
        return "the server, serving epoch %d" % epoch
    if phase == EPOCH_END:
        return "at the end of epoch %d for %.1fs" % (epoch, elapsed)
    return "finished"
