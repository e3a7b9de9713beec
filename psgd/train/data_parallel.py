"""How a step and a sync happen in data-parallel training: every rank holds
the whole model, trains its shard and synchronizes through the chosen
algorithm (ranks 0..S-1 serve, one shard each, under a server algorithm).

The Trainer's epoch loop talks to this object, or to hybrid.ModelParallel,
through the same small interface (see Trainer): roles, build (the network,
its optimizer and the data arrays are the strategy's from then on),
train_epoch, evaluate, rollback, checkpoint state and the final model."""
import contextlib
import time
import warnings

import numpy as np
from mpi4py import MPI

from .. import agreement, mpi
from ..algorithms import REGISTRY, create, lifecycle
from ..data import ShardStream
from ..errors import UsageError
from . import checkpoint as ckpt
from . import resize
from . import shares as work_shares
from . import whole_model
from .defaults import asgd_paced, center_average_examples
from .faults import FiniteGuard
from .metrics import ServerTotals, kaldi_log, short

PACE_NOTED = 0.05   # a log line when N_eff is this far from N (shares.py)


class DataParallel:
    def __init__(self, config, comm):
        self.config, self.comm = config, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.algorithm = REGISTRY[config.run.algo]
        self.server_based = self.algorithm.server_based
        self.servers = config.run.servers
        self.is_server = self.rank < self.servers
        self.num_workers = config.run.num_workers
        first_worker = self.size - self.num_workers   # the servers, when there are any, come first
        self.worker_index = None if self.is_server else self.rank - first_worker
        self.gradients_averaged = self.algorithm.needs_grads
        self.server_totals = ServerTotals()
        # what build() makes
        self.net = self.model_header = self.optimizer = self.train_set = self.held_out = None
        self.sync = self.guard = self.stat_exchange = self.center = self.center_exchange = None
        self.stream = self.shares = None
        self.stream_restored = False

    # set-up ------------------------------------------------------------------------
    def check(self):
        """Before any data is read (config.resolve checked the roles)."""

    def build(self, backend, data):
        """Collective: the whole model, its optimizer and the data arrays;
        the algorithm takes over the network's buffers."""
        whole = whole_model.build(self.comm, self.config, data, backend.xp)
        net = self.net = whole.net
        self.model_header, self.optimizer = whole.header, whole.optimizer
        self.train_set, self.held_out = whole.train, whole.held_out
        options = dict(self.config.algorithm.options)
        if self.server_based:
            options.setdefault("average_examples", center_average_examples(data.total_train))
        self.sync = create(self.config.run.algo, net.params, comm=self.comm,
                           grads=net.grads if self.gradients_averaged else None,
                           stats=net.stat_buffer.views if not self.server_based else None,
                           servers=self.servers if self.server_based else None, **options)
        net.rebind(self.sync.params, self.sync.grads)
        # The server algorithms do not average BatchNorm statistics: the
        # trainer does before evaluating, over this exchange made once.
        self.stat_exchange = mpi.Exchange(self.comm, net.stat_buffer)
        if self.server_based:
            # Every rank evaluates the server's model (its center, or the
            # center's average) in a buffer apart from the one it computes
            # with, where that is the algorithm's to write (the workers').
            self.center = self.sync.model_buffer if self.is_server else net.param_buffer.like()
            self.center_exchange = mpi.Exchange(self.comm, self.center)
        self.guard = FiniteGuard(backend.xp, net.param_buffer.data, net.grad_buffer.data,
                                 self.optimizer, self.config.faults.skip_nonfinite,
                                 keeps_model=not self.is_server)
        run = self.config.run
        # The minibatch order from (seed, worker, pass) alone: a resumed run
        # draws what the uninterrupted one drew, and workers differ.
        if not self.is_server:
            self.stream = ShardStream(*self.train_set, run.minibatch_size,
                                      run.seed * 100003 + self.worker_index)
        self.shares = work_shares.WorkShares(
            self.comm, run.work_shares, self.worker_index,
            0 if self.is_server else self.stream.size, self.size - self.num_workers)

    def announcement(self, data, backend):
        return ("%s on %d ranks (%d workers%s), %s: %d params, %s data %d train / %d "
                "held-out examples, backend %s" % (
                    self.title(), self.size, self.num_workers, _who_serves(self.servers),
                    whole_model.model_name(self.model_header, self.config),
                    self.net.num_params, data.name, data.total_train, data.total_eval,
                    backend.name))

    def title(self):
        return self.config.run.algo

    def choices(self):
        """The log line of what the trainer chose for N (config.resolve): the
        block size and the algorithm options it sets (or the user gave)."""
        algorithm = self.config.algorithm
        parts = ["a sync every minibatch" if self.gradients_averaged else
                 "a sync every %d samples" % algorithm.sync_period]
        parts += ["%s %s" % (k, short(v)) for k, v in sorted(algorithm.options.items())]
        built = self.sync is not None
        if built and self.server_based and "average_examples" not in algorithm.options:
            parts.append("the model kept: the center averaged over %s examples" % short(
                self.sync.options["average_examples"]))
        return "%s for %d workers: %s" % (self.title(), self.num_workers, ", ".join(parts))

    # the epoch -----------------------------------------------------------------------
    def begin_epoch(self, epoch, first, lr, say=False):
        """Collective: the epoch's rate (the Trainer's schedule), the
        workers' shares (shares.py) and the algorithm's round."""
        self.optimizer.lr = lr
        if not first:
            self.shares.agree(epoch, say)
            if asgd_paced(self.config):
                self._pace_alpha(epoch, say)
            self.sync.begin_round()  # server algorithms serve one run() per epoch
        else:
            self.guard.saved()  # what --skip-nonfinite falls back on before the first sync
        if self.stream is not None and not (self.shares.by_speed and
                                            (self.stream_restored or not first)):
            self.stream.seek(epoch)      # one pass of the shard per epoch

    def _pace_alpha(self, epoch, say):
        """asgd's servers: the mean delta by the workers' summed pace."""
        paced = self.shares.summed_pace
        if self.is_server:
            self.sync.set_alpha(1.0 / paced)
        if say and abs(paced - self.num_workers) > PACE_NOTED * self.num_workers:
            kaldi_log("epoch %d: asgd's gain on a delta 1/%.2f (the workers' summed pace)"
                      % (epoch + 1, paced), "epoch")

    def train_epoch(self, epoch, progress, watchdog):
        """(loss sum, frames) of this rank's epoch; the server serves it."""
        if self.is_server:
            watchdog.serve(epoch, self.sync.syncs)
            self.server_totals.add(self.sync.run())
            return 0.0, 0
        run, net, opt, sync = self.config.run, self.net, self.optimizer, self.sync
        w, g = net.param_buffer.data, net.grad_buffer.data
        sync_period = self.shares.sync_period(self.config.algorithm.sync_period)
        budget = self.shares.budget
        net.reset_state()
        net.reseed([run.seed, self.worker_index, epoch])    # dropout masks: likewise
        since, loss_sum, frames_seen, taken = 0, 0.0, 0, 0
        self.shares.begin()
        for xb, yb in self.stream.take(budget):
            taken += len(yb)
            loss = net.loss_and_grad(xb, yb)
            frames = int((yb >= 0).sum()) if yb.ndim > 1 else len(yb)
            loss_sum += float(loss) * frames
            frames_seen += frames
            if self.gradients_averaged:
                frames = self.guard.check(g, frames, self._where(epoch))
                watchdog.enter(epoch, sync.syncs)
                more = sync.synchronize_step(frames, lambda: opt.step(w, g))
                watchdog.leave()
                if not more:
                    return _ended_early(epoch, loss_sum, frames_seen)
            else:
                opt.step(w, g)
                since += frames
                if since >= sync_period:
                    if not self._sync(epoch, since, watchdog):
                        return _ended_early(epoch, loss_sum, frames_seen)
                    since = 0
            progress.update(epoch, run.epochs, taken, budget, loss_sum / max(frames_seen, 1))
        watchdog.enter(epoch, sync.syncs)
        if self.gradients_averaged:
            sync.stop(0, step=lambda: opt.step(w, g))
        else:
            since = self.guard.check(w, since, self._where(epoch))
            sync.stop(since)
            self.shares.end(budget)
            self._after_sync()
        watchdog.leave()
        return loss_sum, frames_seen

    def _where(self, epoch):
        return "before sync %d (epoch %d)" % (self.sync.syncs + 1, epoch + 1)

    def _sync(self, epoch, n_k, watchdog):
        n_k = self.guard.check(self.net.param_buffer.data, n_k, self._where(epoch))
        watchdog.enter(epoch, self.sync.syncs)
        since = time.monotonic()
        more = self.sync.synchronize(n_k)
        self.shares.synced(since)
        watchdog.leave()
        self._after_sync()
        return more

    def _after_sync(self):
        if self.sync.clears_local_state:
            self.optimizer.reset()
        self.guard.saved()

    def syncs(self):
        """Collective: the most syncs any worker made."""
        count = np.array([self.sync.syncs if not self.is_server else 0], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [count, MPI.INT64_T], op=MPI.MAX)
        return int(count[0])

    # end of epoch ---------------------------------------------------------------------
    def evaluate(self):
        """Collective: (loss, accuracy) over every rank's share of the
        held-out set, of the common model or the server's center (a worker
        computes with a copy of it for the while); nan without one."""
        x, y = self.held_out
        sums = np.zeros(3)
        if self.server_based:
            self._average_stats_over_workers()
            self.center_exchange.bcast(mpi.MAIN_RANK)
        with self._computing_with_model():
            if len(y):
                loss, acc = self.net.evaluate(x, y)
                frames = int((y >= 0).sum())
                sums[:] = (loss * frames, acc * frames, frames)
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        if sums[2] == 0:
            return float("nan"), float("nan")
        return sums[0] / sums[2], sums[1] / sums[2]

    def _average_stats_over_workers(self):
        stats = self.net.stat_buffer
        if stats.size == 0:
            return
        s = stats.data
        s *= s.dtype.type(0.0 if self.is_server else 1.0 / self.num_workers)
        self.stat_exchange.allreduce()

    @contextlib.contextmanager
    def _computing_with_model(self):
        """The network computes with the server's model for the while (a
        server algorithm: in `center`), else with its own parameters."""
        apart = self.server_based and self.center is not self.net.param_buffer
        if apart:
            self.net.rebind(self.center.views)
        try:
            yield
        finally:
            if apart:
                self.net.rebind(self.sync.params, self.sync.grads)

    def model(self):
        """The model newbob keeps as its best (rank 0's is what counts)."""
        return (self.center if self.server_based else self.net.param_buffer).data

    def rollback(self, best):
        """newbob rejected the epoch: rank 0's `best` becomes every rank's
        model through the algorithm, which restarts its state from it."""
        self.sync.reset_to(best)
        self.guard.saved()

    # checkpoints and outputs -------------------------------------------------------------
    def header(self):
        return {"algorithm_options": self.sync.options}

    def checkpoint_state(self):
        """(arrays, extra header entries) of this rank's checkpoint."""
        arrays = ckpt.join("net", self.net.state_dict())
        arrays.update(ckpt.join("algo", self.sync.state_dict()))
        arrays.update(ckpt.optimizer_arrays(self.optimizer))
        if self.stream is None:
            return arrays, {}
        return arrays, {"stream": [self.stream.pass_, self.stream.position]}

    def check_checkpoint(self, state):
        """A model-parallel run's checkpoint holds no algorithm state."""

    def load_checkpoint(self, arrays, header):
        self.net.load_state_dict(ckpt.split(arrays, "net"))
        self.sync.load_state_dict(ckpt.split(arrays, "algo"))
        self.optimizer.load_state_dict(ckpt.optimizer_state(arrays))
        if self.stream is not None and "stream" in header:     # where its shares left it
            self.stream.seek(*header["stream"])
            self.stream_restored = True

    def layout(self, header):
        """The checkpoint's ranks and servers beside this job's (resize.py)."""
        return resize.Layout(self.algorithm, header, self.config)

    def load_resized(self, checkpointer, folder, arrays, layout):
        """Collective, at another layout: every rank starts from the
        checkpoint's global model, with its global state (resize.py).
        `arrays`: rank 0's file, or this rank's own where only --servers
        changed (the checkpointer knows ranks, not roles). The local
        optimizer's state is this rank's own file's, as resize rules."""
        self.optimizer.load_state_dict(resize.optimizer_state(
            self.optimizer, ckpt.optimizer_state(arrays), self.gradients_averaged))
        if self.rank != 0 and layout.old_size == self.size:
            arrays = checkpointer.load_from(folder, 0)[0]   # whole: it loaded here already
        self.net.load_state_dict(ckpt.split(arrays, "net"))    # rank 0's statistics
        error, model, state = None, None, None
        try:
            saved = resize.Saved(checkpointer, folder, arrays, layout)
            model = resize.global_model(saved, self.net.param_names, self.sync.buffer.size,
                                        self.rank)
            state = resize.global_state(saved, self.sync, self.rank)
        except UsageError as exc:
            error = exc
        agreement.agree(self.comm, error)
        self.sync.reset_to(model)
        error = None
        try:
            self.sync.load_global_state(state)
        except UsageError as exc:
            error = exc
        agreement.agree(self.comm, error)
        self.guard.saved()

    def final_state(self):
        """Collective: the model to write, on rank 0 (w_g, or the server's
        model: its center, or the center's average)."""
        if self.rank != mpi.MAIN_RANK:
            return None
        with self._computing_with_model():
            return self.net.state_dict()

    def closing_lines(self, say, main):
        """Collective: the last log lines about how the run went."""
        if self.server_based:
            shards = self.server_totals.gather(self.comm, self.is_server, self.servers)
            if say:
                for line in shards:
                    kaldi_log(line, "finish")
            self._flights_line(say)
        dropped = np.array([self.guard.dropped], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [dropped, MPI.INT64_T], op=MPI.SUM)
        if dropped[0] and main:  # even with --quiet: the model lacks their work
            kaldi_log("dropped %d non-finite contribution(s) (--skip-nonfinite)" % dropped[0])

    def _flights_line(self, say):
        """Collective: which workers left their exchanges in flight (easgd's
        overlap), in one Gather of (left, syncs) rows."""
        flight = getattr(self.sync, "flight", None)
        mine = np.array([flight.left if flight else 0, self.sync.syncs], dtype=np.int64)
        main = self.rank == mpi.MAIN_RANK
        rows = np.zeros((self.comm.Get_size(), 2), dtype=np.int64) if main else None
        self.comm.Gather([mine, MPI.INT64_T], [rows, MPI.INT64_T] if main else None, root=0)
        if say and main and rows[:, 0].any():
            workers = ", ".join("rank %d %d of %d syncs" % (r, left, syncs)
                                for r, (left, syncs) in enumerate(rows) if left)
            kaldi_log("exchanges left in flight while the worker computed (--overlap): %s"
                      % workers, "finish")

    def summary(self):
        """The last log line, or None."""
        return None

    def lost_workers(self):
        """{rank: sync} of the workers this server saw die (survival.py)."""
        return dict(self.sync.lost) if self.is_server else {}

    def abandon(self):
        """The job goes on without this object (survival.py): its algorithm
        is not stopped at exit, nor freed (collective with dead ranks)."""
        lifecycle.forget(self.sync)

    def close(self):
        if self.sync is not None:
            self.sync.close()


def _who_serves(servers):
    return {0: "", 1: ", rank 0 serves"}.get(servers, ", ranks 0-%d serve" % (servers - 1))


def _ended_early(epoch, loss_sum, frames_seen):
    """synchronize said all are done while this worker had data left: every
    worker still training dropped (--skip-nonfinite) at the same sync."""
    warnings.warn("epoch %d ends early: every worker still training dropped its "
                  "contribution to the same sync" % (epoch + 1))
    return loss_sum, frames_seen
