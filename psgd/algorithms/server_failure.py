"""How a parameter server gives up (server.py's event loop calls it): tell
every running worker why, drop the model messages still on their way, wait
for each worker's FINISHED, then raise, so no rank is left blocked and no
message unreceived. And how it loses a worker whose process died
(survive_worker_loss) and goes on without it."""
import sys
import time

import numpy as np
from mpi4py import MPI

from .. import ulfm
from ..errors import ProtocolError
from ..protocol import LEADER_FAILED, MSG_FINISHED, NOTICE_SERVER_ERROR, TAG_MODEL, TAG_NOTICE
from .waiting import FIRST_SLEEP

LOST = object()      # what a step of the event loop returns when it lost a worker


class GivingUp:
    """Mixin of Server: the failure path over its ControlQueue (self.control)."""

    def _guarded(self, step, *args):
        """step(*args), giving up on an error (so every worker hears of it),
        or LOST when it found a worker's process dead (survive_worker_loss)."""
        try:
            return step(*args)
        except (ProtocolError, KeyboardInterrupt):
            raise
        except MPI.Exception as exc:
            if not (self.survive_worker_loss and ulfm.failed_on(exc, self.comm)):
                self._give_up(NOTICE_SERVER_ERROR, self.node.rank, 0, None)
                raise
            self._lose(())             # the ranks MPI knows dead
            return LOST
        except Exception:
            self._give_up(NOTICE_SERVER_ERROR, self.node.rank, 0, None)
            raise

    def _lose(self, ranks):
        """Drop the workers whose processes died (survive_worker_loss):
        `ranks`, and any other MPI knows dead."""
        ranks = [r for r in sorted(set(ranks) | set(ulfm.failed_ranks(self.comm)))
                 if r in self.running]
        for rank in ranks:
            self.lost[rank] = self.syncs
            self.running.discard(rank)
            # its queued entry goes; its receive, if still posted, completes in
            # error later and is ignored (the rank is no longer running)
            self.control.take(rank)
            sys.stderr.write("psgd: %s server: worker rank %d lost at sync %d (its process "
                             "died); %d other worker%s still in this round\n" % (
                                 self.name, rank, self.syncs, len(self.running),
                                 "" if len(self.running) == 1 else "s"))
            sys.stderr.flush()
            self.worker_lost(rank)
        self.control.lost.clear()

    def _give_up(self, code, sender, value, text):
        """Tell every running worker, drain what they still send, wait for each
        one's FINISHED, then raise (the original error is re-raised by run)."""
        self.notice_sent = (code, sender, value)
        self.in_flight.wait_all()         # before the notices: the workers are in them still
        if self.order is not None and self.order.leads:
            self.order.tell(LEADER_FAILED)
        for rank in sorted(self.running):
            self._notify(rank, code, sender, value)
        waiting = set(self.running)       # the sender too: it is a psgd worker and will answer
        control = self.control
        # the sender, or the one being served when an update failed
        for rank in waiting - control.ranks():
            if not control.posted(rank):
                control.post(rank)
        delay = FIRST_SLEEP
        while waiting:
            drained = self._drain_models()
            while control:
                rank, message, _, _ = control.popleft()
                if message != MSG_FINISHED:          # its payload, if any, is drained as it comes
                    control.post(rank)
                else:
                    waiting.discard(rank)
            if waiting and not control.listening():
                break                                # nothing more can arrive
            if waiting:
                bad = control.poll(False, self.stats, self.syncs)
                for _, rank, _, _ in bad:
                    waiting.discard(rank)
                if drained or bad or control:
                    delay = FIRST_SLEEP
                else:
                    time.sleep(delay)
                    delay = min(2 * delay, self.poll_max_sleep)
        self.failure = "%s server: %s" % (self.name, text or "failed")
        if text is not None:
            raise ProtocolError(self.failure)

    def _drain_models(self):
        """Drop the model messages still in flight (a queued SYNC's payload, or
        the one being served when an update failed): past the eager limit (4
        KiB in Open MPI's shared memory) a worker's send, and so its answer to
        the notice, waits until the server receives it."""
        status, count = MPI.Status(), 0
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_MODEL, status=status):
            scratch = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)  # host: dropped
            self.comm.Recv([scratch, MPI.BYTE], source=status.Get_source(), tag=TAG_MODEL)
            count += 1
        return count

    def _notify(self, rank, code, sender=0, value=0):
        notice = np.array([code, sender, value], dtype=np.int64)
        self.comm.Send([notice, MPI.INT64_T], dest=rank, tag=TAG_NOTICE)
