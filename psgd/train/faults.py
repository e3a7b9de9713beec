"""Faults a long MPI job must survive or report: a rank that sends NaN/Inf,
and a rank that stops arriving at syncs (a stall)."""
import sys
import threading
import time
import warnings

import numpy as np
from mpi4py import MPI


class NonFiniteError(RuntimeError):
    pass


class FiniteGuard:
    """Before a worker sends its model (or gradient), one read-only pass: the
    sum is NaN/Inf whenever an element is (an overflow of the sum itself is
    re-checked element-wise). By default a non-finite contribution stops the
    job naming the sync (the CLI adds the rank); with skip, it is replaced by
    the last good state with weight zero and counted."""

    def __init__(self, trainer, skip):
        self.trainer, self.skip = trainer, skip
        self.dropped = 0
        self.snapshot = None

    def check(self, buffer, n_k):
        xp = self.trainer.backend.xp
        if bool(xp.isfinite(buffer.sum())) or bool(xp.isfinite(buffer).all()):
            return n_k
        t = self.trainer
        gradient = buffer is t.net.grad_buffer.data
        where = "non-finite %s before sync %d (epoch %d)" % (
            "gradient" if gradient else "model", t.sync.syncs + 1, getattr(t, "epoch", 0) + 1)
        if not self.skip:
            raise NonFiniteError(where + "; stopping (--skip-nonfinite drops such "
                                 "contributions instead)")
        warnings.warn(where + ": contribution dropped")
        self.dropped += 1
        if gradient:
            # The optimizer has not seen it: its state stays what every
            # replica holds (syncgrad's replicas must stay identical).
            buffer.fill(0)
            return 0
        # A server algorithm adds what a worker sends even at weight zero:
        # send the model of the last good sync (asgd: a zero delta).
        buffer[...] = self.snapshot if self.snapshot is not None else 0
        t.optimizer.reset()  # its moments took in the NaN gradient
        return 0

    def saved(self):
        """At the start and after each good sync: the model to fall back on
        (kept only with skip)."""
        if self.skip and not self.trainer.is_server:
            w = self.trainer.net.param_buffer.data
            if self.snapshot is None:
                self.snapshot = w.copy()
            else:
                self.snapshot[...] = w


# Stall watchdog -------------------------------------------------------------------
COMPUTING, SYNCING, DONE, SERVING, EPOCH_END = 0, 1, 2, 3, 4
WAITING = (SYNCING, SERVING, EPOCH_END)
_STATUS = 5  # phase, epoch, sync number, milliseconds in phase, rank
_TAG = 7


class Watchdog:
    """Every rank's status reaches rank 0's watchdog thread once a second on
    a communicator of its own (like Horovod's stall check). While some rank
    waits (in a sync, at the end of an epoch, or serving as the server),
    rank 0 names the ranks that have not reached a sync for longer than
    `timeout` and what they were doing. When no rank computes and workers
    have waited past `timeout`, the one not answering is the server, or
    (collective algorithms) nobody: every rank waits in MPI. With `abort`,
    rank 0 then ends the job. No thread runs when timeout is None or the job
    has one rank."""

    def __init__(self, comm, timeout, abort=False, period=1.0):
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
        if self.rank != 0:
            while True:
                stopping = self.stopping.wait(self.period)
                status = self._status()
                if stopping:
                    status[0] = DONE
                self.comm.Send(status, dest=0, tag=_TAG)
                if stopping:
                    return
        table = np.full((self.size, _STATUS), -1, dtype=np.int64)
        seen_at = np.zeros(self.size)
        # One receive posted per rank, drained with Testsome: MPICH's Iprobe
        # let one message through per call and the table fell behind.
        landing = np.zeros((self.size, _STATUS), dtype=np.int64)
        requests = [MPI.REQUEST_NULL] + [self.comm.Irecv(landing[r], source=r, tag=_TAG)
                                         for r in range(1, self.size)]
        while True:
            stopping = self.stopping.wait(self.period)
            table[0], seen_at[0] = self._status(), time.time()
            while True:
                done = MPI.Request.Testsome(requests)
                if not done:
                    break
                for r in done:
                    table[r], seen_at[r] = landing[r], time.time()
                    if landing[r, 0] != DONE:
                        requests[r] = self.comm.Irecv(landing[r], source=r, tag=_TAG)
            if all(q == MPI.REQUEST_NULL for q in requests):
                return          # every other rank said goodbye
            if not stopping:
                self._report(table, seen_at)

    def _report(self, table, seen_at):
        line = stall_report(table, seen_at, time.time(), self.timeout, time.time() - self.started)
        key = line and line[1]
        if key == self.reported:
            return
        self.reported = key
        if not line:
            return
        sys.stderr.write(line[0] + "\n")
        if self.abort:
            sys.stderr.write("psgd: stall: --stall-abort ends the job\n")
        sys.stderr.flush()
        if self.abort:
            self.comm.Abort(3)

    def close(self):
        """Collective in effect: every rank's thread says goodbye to rank 0's."""
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
    elapsed = table[:, 3] / 1000.0 + (now - seen_at)
    waiting = [r for r in range(size) if phase[r] in WAITING]
    if not waiting:
        return None
    late = [r for r in range(size) if (phase[r] == COMPUTING and elapsed[r] > timeout)
            or (phase[r] < 0 and running > timeout)]
    stuck = [r for r in waiting if phase[r] == SYNCING and elapsed[r] > timeout]
    if not late and stuck and all(phase[r] in WAITING for r in range(size)):
        if phase[0] == SERVING:
            # Every worker waits and the server has been asked: it is the one.
            late = [0]
            waiting.remove(0)
        elif all(elapsed[r] > timeout for r in range(size)):
            line = "psgd: stall: every rank has waited for more than %gs (stuck in MPI?): %s" % (
                timeout, ", ".join(_describe(r, table[r], elapsed[r]) for r in range(size)))
            return line, ("all",) + tuple(int(table[r, 2]) for r in stuck)
    if not late:
        return None
    if late == [0] and phase[0] == SERVING:
        what = ["rank 0 (the server, epoch %d: no answer for %.1fs)" % (
            table[0, 1] + 1, max(elapsed[r] for r in stuck))]
    else:
        what = [_describe(r, table[r], elapsed[r]) for r in late]
    line = "psgd: stall: not arrived after %gs: %s; waiting: %s" % (
        timeout, ", ".join(what), ", ".join(_describe(r, table[r], elapsed[r]) for r in waiting))
    return line, tuple((r, int(table[r, 0]), int(table[r, 1]), int(table[r, 2])) for r in late)


def _describe(r, status, elapsed):
    phase, epoch, sync_no = int(status[0]), int(status[1]) + 1, int(status[2])
    if phase < 0:
        return "rank %d (never reported)" % r
    if phase == COMPUTING:
        return "rank %d (computing for %.1fs in epoch %d, after sync %d)" % (
            r, elapsed, epoch, sync_no)
    if phase == SYNCING:
        return "rank %d (in sync %d of epoch %d for %.1fs)" % (r, sync_no + 1, epoch, elapsed)
    if phase == SERVING:
        return "rank %d (the server, serving epoch %d)" % (r, epoch)
    if phase == EPOCH_END:
        return "rank %d (at the end of epoch %d for %.1fs)" % (r, epoch, elapsed)
    return "rank %d (finished)" % r
