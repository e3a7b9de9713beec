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
    job naming the rank and the sync; with skip, it is replaced by the last
    good state with weight zero and counted."""

    def __init__(self, trainer, skip):
        self.trainer, self.skip = trainer, skip
        self.dropped = 0
        self.snapshot = None

    def check(self, buffer, n_k):
        xp = self.trainer.backend.xp
        if bool(xp.isfinite(buffer.sum())) or bool(xp.isfinite(buffer).all()):
            return n_k
        t = self.trainer
        where = "rank %d: non-finite %s before sync %d (epoch %d)" % (
            t.rank, "gradient" if buffer is t.net.grad_buffer.data else "model",
            t.sync.syncs + 1, getattr(t, "epoch", 0) + 1)
        if not self.skip:
            raise NonFiniteError(where + "; stopping (--skip-nonfinite drops such "
                                 "contributions instead)")
        warnings.warn(where + ": contribution dropped")
        self.dropped += 1
        if buffer is t.net.grad_buffer.data or self.snapshot is None:
            buffer.fill(0)
        else:
            buffer[...] = self.snapshot
        t.optimizer.reset()
        return 0

    def saved(self):
        """After a good sync: keep the model to fall back on (only with skip)."""
        if self.skip and not self.trainer.is_server:
            w = self.trainer.net.param_buffer.data
            if self.snapshot is None:
                self.snapshot = w.copy()
            else:
                self.snapshot[...] = w


# Stall watchdog -------------------------------------------------------------------
COMPUTING, SYNCING, DONE = 0, 1, 2
PHASES = {COMPUTING: "computing", SYNCING: "waiting in a sync", DONE: "finished"}
_STATUS = 5  # phase, epoch, sync number, seconds in phase (x1000), rank


class Watchdog:
    """Every rank's status reaches rank 0's watchdog thread once a second on
    a communicator of its own; when a rank has waited in a sync for longer
    than `timeout`, rank 0 names the ranks that have not arrived and what
    they were last doing (like Horovod's stall check). With `abort`, rank 0
    then ends the job. No thread runs when timeout is None or the job has one
    rank."""

    def __init__(self, comm, timeout, abort=False, period=1.0):
        self.timeout, self.abort = timeout, abort
        self.phase, self.epoch, self.sync_no, self.since = COMPUTING, 0, 0, time.time()
        self.thread = None
        if not timeout or comm.Get_size() < 2 or MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            return
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.period = min(period, timeout / 4)
        self.stopping = threading.Event()
        self.reported = set()
        self.thread = threading.Thread(target=self._loop, name="psgd-watchdog", daemon=True)
        self.thread.start()

    def enter(self, epoch, sync_no):
        self.phase, self.epoch, self.sync_no, self.since = SYNCING, epoch, sync_no, time.time()

    def leave(self):
        self.phase, self.since = COMPUTING, time.time()

    def _status(self):
        return np.array([self.phase, self.epoch, self.sync_no,
                         int(1000 * (time.time() - self.since)), self.rank], dtype=np.int64)

    def _loop(self):
        table = np.full((self.size, _STATUS), -1, dtype=np.int64)
        seen_at = np.zeros(self.size)
        incoming = np.empty(_STATUS, dtype=np.int64)
        finished = 0
        while True:
            stopping = self.stopping.wait(self.period)
            status = self._status()
            if stopping:
                status[0] = DONE
            if self.rank != 0:
                self.comm.Send(status, dest=0, tag=7)
                if stopping:
                    return
                continue
            table[0], seen_at[0] = status, time.time()
            while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=7):
                self.comm.Recv(incoming, source=MPI.ANY_SOURCE, tag=7)
                r = int(incoming[4])
                table[r], seen_at[r] = incoming, time.time()
                finished += incoming[0] == DONE
            if stopping and finished >= self.size - 1:
                return
            self._report(table, seen_at)

    def _report(self, table, seen_at):
        now = time.time()
        waiting = [r for r in range(self.size) if table[r, 0] == SYNCING
                   and table[r, 3] / 1000.0 + (now - seen_at[r]) > self.timeout]
        if not waiting:
            self.reported.clear()
            return
        key = tuple(sorted((r, int(table[r, 2])) for r in waiting))
        if key in self.reported:
            return
        self.reported.add(key)
        late = [r for r in range(self.size) if r not in waiting]
        lines = ["psgd: stall: rank%s %s waiting in a sync for more than %gs; not arrived: %s" % (
            "s" if len(waiting) > 1 else "", ",".join(map(str, waiting)), self.timeout,
            ", ".join(self._describe(r, table, seen_at, now) for r in late) or "none")]
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()
        if self.abort:
            sys.stderr.write("psgd: stall: --stall-abort ends the job\n")
            sys.stderr.flush()
            self.comm.Abort(3)

    @staticmethod
    def _describe(r, table, seen_at, now):
        if table[r, 0] < 0:
            return "rank %d (never reported)" % r
        return "rank %d (%s for %.0fs, epoch %d, after sync %d)" % (
            r, PHASES.get(int(table[r, 0]), "?"), table[r, 3] / 1000.0 + now - seen_at[r],
            table[r, 1] + 1, table[r, 2])

    def close(self):
        """Collective in effect: every rank's thread says goodbye to rank 0's."""
        if self.thread is not None:
            self.stopping.set()
            self.thread.join()
            self.comm.Barrier()
            self.comm.Free()
            self.thread = None

