"""Work shares by speed, for the server algorithms' workers (--work-shares).

An epoch is the training set, B = sum_k B_k examples (B_k: worker k's
shard; sequences for the LSTM), and with `equal` shares each worker takes
its own B_k.
A worker on a slower host then ends each epoch last while the others wait
for it, and the epoch costs what the slowest worker's shard costs. With
`speed` shares the workers still take B examples in all, each in
proportion to the rate it trained at in the last epoch:

    b_k = B * r_k / sum_j r_j,   r_k = examples / seconds from the
                                       epoch's start to its last sync

rounded so that sum_k b_k = B (largest remainders). And each worker syncs
after its pace times the block size, p_k = c_k / max_j c_j with c_k its
compute rate (examples / seconds outside its syncs), so that a worker whose
minibatches are slower syncs about as often in time as the others and its
contributions are no staler (dynamic local updates: Liu et al.,
"Asynchronous Local-SGD Training for Language Modeling", 2024). A worker
slowed by its link keeps the block: syncing more often would cost it more. Each worker walks its
own shard in passes (psgd.data.ShardStream) and an epoch may end inside a
pass, its last minibatch cut short to fit: a slower worker's examples
come round less often, as with any
parameter server whose workers read their own input. Only the server
algorithms can use this: a collective sync waits for every worker anyway.
The first epoch of a job, a resumed one included, takes equal shares.

The rates also give the workers' summed pace, N_eff = sum_k r_k / median_j
r_j: N with workers alike, 3.5 with one of 4 at half speed. asgd's mean
delta divides by it (the trainer's alpha = 1 / N_eff), so the center moves
as far per round of the others as it would without the slow worker.
"""
import time

import numpy as np

from .metrics import kaldi_log

KINDS = ("speed", "equal")
# A log line when some worker's share is this far below its own shard's:
# rates on a shared machine swing by a fifth from epoch to epoch.
NOTED = 0.25


def split(total, rates):
    """Integers proportional to `rates` summing to `total`, each at least 1
    where total allows (largest remainders); equal for rates of 0 or nan."""
    r = np.asarray(rates, dtype=np.float64)
    if not _known(r):
        r = np.ones(len(r))
    exact = total * r / r.sum()
    shares = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - shares), kind="stable")
    shares[order[:total - int(shares.sum())]] += 1
    while total >= len(r) and np.any(shares == 0):   # every worker keeps an example
        shares[np.argmax(shares)] -= 1
        shares[np.argmin(shares)] += 1
    return shares


class WorkShares:
    """Each worker's examples for the coming epoch, agreed by all ranks
    at the epoch's start from what each took and how fast."""

    def __init__(self, comm, kind, worker_index, own_examples, first_worker):
        self.comm, self.kind = comm, kind
        self.worker_index, self.first_worker = worker_index, first_worker
        self.budget = own_examples     # B_k, this worker's shard, until agree()
        self.rate = self.compute_rate = float("nan")
        self.pace = 1.0            # p_k: c_k over the fastest worker's
        self.summed_pace = None    # N_eff, once agree() knows every rate
        self.started = None
        if self.by_speed:       # every rank resolved the same kind: all gather, or none
            everyone = np.empty(comm.Get_size(), dtype=np.int64)
            comm.Allgather(np.array([own_examples], dtype=np.int64), everyone)
            self.all_own = everyone[first_worker:]

    @property
    def by_speed(self):
        return self.kind == "speed"

    def agree(self, epoch, say):
        """Collective (every rank, at an epoch's start but the job's first):
        this worker's budget from every worker's rate in the last epoch."""
        if not self.by_speed:
            return
        rates = np.empty((self.comm.Get_size(), 2), dtype=np.float64)
        self.comm.Allgather(np.array([self.rate, self.compute_rate]), rates)
        r, c = rates[self.first_worker:].T
        shares = split(int(self.all_own.sum()), r)
        self.summed_pace = summed_pace(r)
        if self.worker_index is not None:
            self.budget = int(shares[self.worker_index])
            self.pace = float(c[self.worker_index] / c.max()) if _known(c) else 1.0
        if say and np.min(shares / np.maximum(self.all_own, 1)) < 1 - NOTED:
            slow = int(np.argmin(shares))
            kaldi_log("epoch %d: work shares by speed, examples per worker %s (rank %d "
                      "slowest)" % (epoch + 1, "/".join(str(int(s)) for s in shares),
                                    slow + self.first_worker), "epoch")

    def sync_period(self, samples):
        """This worker's samples between syncs: the block size times its pace."""
        return max(1, int(round(samples * self.pace)))

    def begin(self):
        self.started, self.syncing = time.monotonic(), 0.0

    def synced(self, since):
        """A sync that began at `since` (time.monotonic) is done."""
        self.syncing += time.monotonic() - since

    def end(self, examples):
        """This worker's last sync of the epoch is done: its rates."""
        seconds = time.monotonic() - self.started
        self.rate = _per_second(examples, seconds)
        self.compute_rate = _per_second(examples, seconds - self.syncing)


def summed_pace(rates):
    """N_eff = sum_k r_k / median_j r_j; the number of workers while some
    rate is unknown (nan or 0)."""
    r = np.asarray(rates, dtype=np.float64)
    return float(r.sum() / np.median(r)) if _known(r) else float(len(r))


def _known(rates):
    """Every rate measured: finite and above 0."""
    return bool(np.all(np.isfinite(rates)) and np.all(rates > 0))


def _per_second(examples, seconds):
    return examples / seconds if examples and seconds > 0 else float("nan")
