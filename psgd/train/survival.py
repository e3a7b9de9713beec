"""--survive-worker-loss in the trainer; the server's half (dropping a dead
worker and serving the others to the end of the epoch) is in
psgd/algorithms/server.py, the MPI calls in psgd/ulfm.py.

At the end of each epoch's training, before any collective that would meet
a dead rank, the live ranks agree whether a worker died (ULFM's Agree,
which completes with dead ranks). If one did, they shrink the communicator
and the job goes on in the same processes at N - 1 workers: rank 0 (the
server, which no job survives losing) hands its checkpoint state of that
epoch over the new communicator, and a new Trainer takes it as --resume at
another number of ranks would take a checkpoint (resize.py: the center,
global state carried, per-worker state restarted, defaults of the new N,
the data sharded again, every change logged). The epoch is then evaluated
and checkpointed by the survivors, and training goes on. What the dead
worker trained since its last sync is lost; nothing else is."""
import contextlib
import io
import json
import time

import numpy as np
from mpi4py import MPI

from .. import agreement, ulfm
from ..errors import CollectiveUsageError, ServerDiedError, UsageError
from .metrics import kaldi_log


LOST = []      # every rank this process's job lost, in the order lost
# Longer than any epoch end's Agree takes (milliseconds): past it the
# failure notices are not coming, and the job ends with a line, not a hang.
AGREE_DEADLINE_S = 60.0


class WorkersLost(Exception):
    """Raised on every live rank; train.run goes on with `handoff`."""

    def __init__(self, handoff):
        super().__init__("workers lost: ranks %s" % handoff.lost)
        self.handoff = handoff


class Handoff:
    """What a new Trainer over `comm` (the survivors) starts from: rank 0's
    checkpoint (arrays, header) of `epoch`, whose end (evaluation, metrics,
    checkpoint) is still to come, with this rank's training sums of it."""

    def __init__(self, comm, arrays, header, train, lr, lost, hosts, syncs, server_totals,
                 started):
        self.comm, self.arrays, self.header = comm, arrays, header
        self.epoch = header["epoch"]
        self.train, self.lr, self.lost, self.hosts = train, lr, lost, hosts
        self.syncs = syncs                  # the most syncs a worker made, up to the loss
        self.server_totals = server_totals  # the server's (rank 0), carried on
        self.started = started              # time.time() when the job's training began


def refuse_unless_possible(config):
    """The trainer's own refusals (the algorithm refuses the rest)."""
    if not _surviving(config):
        return
    if config.flags.get("model_parallel"):
        raise UsageError("--survive-worker-loss: not with --model-parallel, whose every "
                         "layer needs every rank")
    if config.run.servers > 1:
        raise UsageError("--survive-worker-loss needs one server (--servers %d): shards would "
                         "have to agree on a lost worker mid-round" % config.run.servers)
    if config.outputs.timeline:
        raise UsageError("--survive-worker-loss: not with --timeline, whose ranks a loss "
                         "would renumber")


def _surviving(config):
    return bool(config.algorithm.options.get("survive_worker_loss"))


class Survival:
    """The end-of-epoch check of one Trainer; None where the job does not
    survive losses (survival(config, comm, hosts))."""

    def __init__(self, comm, hosts):
        self.comm, self.hosts = comm.Dup(), hosts

    @contextlib.contextmanager
    def training(self, trainer, epoch):
        """Around an epoch's steps and syncs. A sync that meets a dead server
        ends this rank's epoch there, and the rank still meets the others in
        their check before it ends (ServerDiedError, naming the server's
        host): a rank that ended at once left the others waiting in the
        check's Agree for the MPI's notice of its exit, which Open MPI's
        ULFM did not give (benchmarks/FINDINGS.md)."""
        try:
            yield
        except ServerDiedError as exc:
            trainer.comm.Revoke()       # a rank in an epoch end's collective leaves it
            self._shrunk(trainer, epoch, [exc])     # raises: the server is among the lost
            raise exc.on(self.hosts[0]) from None

    @contextlib.contextmanager
    def epoch_end(self, trainer, epoch, train, lr, wall):
        """Around the end of an epoch (its collectives: evaluation, metrics,
        checkpoint), then the check. A rank whose collective fails on a dead
        rank revokes the trainer's communicator, so that every other rank's
        next collective fails too and no rank waits for one the others
        left; all then meet in the check (its communicator is not revoked)
        and go on from the state before this end, which the new trainer
        runs again."""
        before = (trainer.samples, trainer.schedule.state(), time.time() - wall)
        with _revoking(trainer.comm) as failed:
            yield
        self.check(trainer, epoch, train, lr, wall, before, failed)

    @contextlib.contextmanager
    def job_end(self, trainer):
        """Around the job's last collectives (after the last epoch's check),
        then an agreement among the live ranks that doubles as their last
        barrier: a rank that leaves with os._exit (worker.py) must not take
        with it a message another rank's collective still waits for. A
        worker that dies here is named; its work was all in, the final
        model written first (Trainer.finish), and the job ends well."""
        with _revoking(trainer.comm) as failed:
            yield
        if self._none_lost(bool(failed)):
            return
        lost = ulfm.failed_ranks(self.comm)
        LOST.extend(lost)
        trainer.abandon(lost)       # its close() would free communicators with the dead
        if 0 in lost:
            raise self._server_lost(trainer, failed, "was lost as the job ended (the final "
                                    "model may be incomplete)")
        if trainer.main:
            kaldi_log("lost %s as the job ended (the process died), after the last epoch's "
                      "work was in" % _ranks_by_host(lost, self.hosts), "survive")

    def check(self, trainer, epoch, train, lr, wall, before, failed):
        """Collective over the live ranks: returns when no worker died,
        else raises WorkersLost on every one of them (ServerDiedError where
        the server died). `failed`: what this rank met (_revoking)."""
        shrunk = self._shrunk(trainer, epoch, failed)
        if shrunk is None:
            return
        survivors, lost = shrunk
        if survivors.Get_size() < 2:
            raise CollectiveUsageError(
                "every worker was lost (rank%s %s, in epoch %d): no worker is left to train%s" % (
                    "s" if len(lost) > 1 else "", ", ".join(map(str, lost)), epoch + 1,
                    "; the last checkpoint in %s is as it was" % trainer.config.outputs.checkpoint_dir
                    if trainer.config.outputs.checkpoint_dir else ""))
        arrays = header = None
        if survivors.Get_rank() == 0:
            arrays, extra = trainer.parallel.checkpoint_state()
            if trainer.best is not None:
                arrays["best"] = trainer.backend.to_host(trainer.best)
            header = dict(trainer.header(), samples=before[0], wall=wall, schedule=before[1],
                          epoch=epoch, rank=0, size=trainer.size, **extra)
        arrays, header = _broadcast(survivors, arrays, header)
        p = trainer.parallel
        syncs = np.array([0 if p.is_server else p.sync.syncs], dtype=np.int64)
        survivors.Allreduce(MPI.IN_PLACE, [syncs, MPI.INT64_T], op=MPI.MAX)
        raise WorkersLost(Handoff(survivors, arrays, header, train, lr, lost, self.hosts,
                                  int(syncs[0]), p.server_totals if p.is_server else None,
                                  started=before[2]))

    def _shrunk(self, trainer, epoch, failed):
        """Collective over the live ranks: None when none knows of a death;
        else (the survivors' communicator, the lost ranks), or
        ServerDiedError on every one where the server is among them."""
        if self._none_lost(bool(failed) or bool(trainer.parallel.lost_workers())):
            return None
        survivors, lost = ulfm.shrink(self.comm)
        LOST.extend(lost)
        if 0 in lost:
            raise self._server_lost(trainer, failed, "was lost in epoch %d" % (epoch + 1))
        return survivors, lost

    def _server_lost(self, trainer, failed, how):
        """The error every live rank raises once they agree the server died:
        the one a sync of this rank met (which says how), else `how`."""
        met = [exc for exc in failed if isinstance(exc, ServerDiedError)]
        exc = met[0] if met else ServerDiedError(trainer.config.run.algo, how)
        return exc.on(self.hosts[0])

    def _none_lost(self, lost_here):
        try:
            return ulfm.agree_none_lost(self.comm, lost_here, AGREE_DEADLINE_S)
        except TimeoutError as exc:
            raise RuntimeError("%s (the MPI's failure notices never came: did the launcher's "
                               "daemon of a host die with its ranks?)" % exc) from None

    def say_lost(self, handoff, size, say):
        if say:
            kaldi_log("lost %s in epoch %d (the process died): going on with %d ranks from "
                      "the server's center, as --resume at %d ranks would" % (
                          _ranks_by_host(handoff.lost, handoff.hosts), handoff.epoch + 1, size,
                          size), "survive")


@contextlib.contextmanager
def _revoking(comm):
    """Yields a list that holds the error once a call inside failed on a
    dead rank (an MPI error, or the ServerDiedError a sync raises): then
    `comm` is revoked, so that every other rank's next collective on it
    fails too and no rank waits for one the others left."""
    failed = []
    try:
        yield failed
    except (MPI.Exception, ServerDiedError) as exc:
        if isinstance(exc, MPI.Exception) and not ulfm.failed_on(exc, comm):
            raise
        comm.Revoke()
        failed.append(exc)


def _ranks_by_host(ranks, hosts):
    """'rank 3 on h1', 'ranks 2, 3 on h1, rank 5 on h2'."""
    by_host = {}
    for r in ranks:
        by_host.setdefault(hosts[r], []).append(str(r))
    return ", ".join("rank%s %s on %s" % ("s" if len(r) > 1 else "", ", ".join(r), h)
                     for h, r in by_host.items())


def survival(config, comm, hosts):
    return Survival(comm, hosts) if _surviving(config) else None


def _broadcast(comm, arrays, header):
    """Rank 0's (arrays, header) on every rank, as a checkpoint file would
    carry them (an .npz and its JSON header)."""
    blob = None
    if comm.Get_rank() == 0:
        out = io.BytesIO()
        np.savez(out, __header__=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                 **arrays)
        blob = out.getvalue()
    blob = agreement.broadcast_bytes(comm, blob, 0)
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(arrays.pop("__header__").tobytes().decode())
    return arrays, header
