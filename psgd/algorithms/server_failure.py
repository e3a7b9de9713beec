"""How a parameter server gives up (server.py's event loop calls it): tell
every running worker why, drop the model messages still on their way, wait
for each worker's FINISHED, then raise, so no rank is left blocked and no
message unreceived."""
import time

import numpy as np
from mpi4py import MPI

from .. import mpi
from ..errors import ProtocolError
from .service_order import LEADER_FAILED
from .waiting import FIRST_SLEEP

# TAG_MSG = 0 and TAG_MODEL = 1 are the contract's; the notices ("done", or why
# the server gave up) get their own.
TAG_NOTICE = 2

class GivingUp:
    """Mixin of Server: the failure path over its control-message queue."""

    def _give_up(self, code, sender, value, text):
        """Tell every running worker, drain what they still send, wait for each
        one's FINISHED, then raise (the original error is re-raised by run)."""
        self._notice_sent = (code, sender, value)
        if self.order is not None and self.order.leads:
            self.order.tell(LEADER_FAILED)
        for rank in sorted(self.running):
            self._notify(rank, code, sender, value)
        waiting = set(self.running)       # the sender too: it is a psgd worker and will answer
        queued = {entry[0] for entry in self._queue}
        for rank in waiting - queued:     # the sender, or the one being served when an update failed
            if self._requests[rank - self.servers] == MPI.REQUEST_NULL:
                self._post(rank)
        delay = FIRST_SLEEP
        while waiting:
            drained = self._drain_models()
            while self._queue:
                rank, message, _, _ = self._queue.popleft()
                if message == mpi.MSG_SYNC:          # its payload is drained as it comes
                    self._post(rank)
                else:
                    waiting.discard(rank)
            if waiting and all(r == MPI.REQUEST_NULL for r in self._requests):
                break                                # nothing more can arrive
            if waiting:
                bad = self._poll(block=False, failing=True)
                for _, rank, _, _ in bad:
                    waiting.discard(rank)
                if drained or bad or self._queue:
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
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=mpi.TAG_MODEL, status=status):
            scratch = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)  # host: dropped
            self.comm.Recv([scratch, MPI.BYTE], source=status.Get_source(), tag=mpi.TAG_MODEL)
            count += 1
        return count

    def _notify(self, rank, code, sender=0, value=0):
        notice = np.array([code, sender, value], dtype=np.int64)
        self.comm.Send([notice, MPI.INT64_T], dest=rank, tag=TAG_NOTICE)
