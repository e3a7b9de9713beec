"""The training loop: each rank trains its shard and synchronizes through
the chosen algorithm; rank 0 serves under a server algorithm. Epochs end
together: the workers fold in their last block (stop), the held-out set is
evaluated in shares on every rank, and rank 0 logs and writes the model."""
import time
import warnings

import numpy as np
from mpi4py import MPI

from .. import mpi
from ..algorithms import REGISTRY, create
from ..backend import get_backend
from ..data import Minibatches
from ..errors import UsageError
from ..nnet import build_model, create_optimizer
from . import checkpoint as ckpt
from . import model_io
from .data_setup import combine, read_local
from .faults import FiniteGuard, Watchdog
from .metrics import MetricsLog, Progress, ServerTotals, kaldi_epoch_lines, kaldi_log
from .options import algorithm_options, default_lr, default_sync_period
from .schedule import Schedule


class Trainer:
    def __init__(self, args, comm=None):
        self.args = args
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.algorithm = REGISTRY[args.algo]
        self.server_based = self.algorithm.server_based
        self.is_server = self.server_based and self.rank == 0
        if self.server_based:
            self.num_workers = self.size - 1
            self.worker_index = None if self.is_server else self.rank - 1
        else:
            self.num_workers, self.worker_index = self.size, self.rank
        self.main = self.rank == 0
        self.say = self.main and not args.quiet
        self.start_epoch, self.samples, self.best = 0, 0, None
        self.server_totals = ServerTotals()
        self.wall_offset = 0.0

    # set-up ------------------------------------------------------------------------
    def setup(self):
        args, error, local = self.args, None, None
        try:
            if self.server_based and self.size < 2:
                raise UsageError("%s needs a server and at least one worker: run with "
                                 "mpirun -np 2 or more" % args.algo)
            self.backend = get_backend(args.backend, mpi.Node(self.comm).local_rank, args.gpu_ids)
            local = read_local(args, self.rank, self.size, self.worker_index, self.num_workers)
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        mpi.agree(self.comm, error)
        self.data = combine(args, self.comm, local, self.worker_index,
                            sequences=args.model == "lstm")
        error = None
        try:
            self._build()
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        mpi.agree(self.comm, error)
        net = self.net
        self.sync = create(args.algo, net.params, comm=self.comm,
                           grads=net.grads if getattr(self.algorithm, "needs_grads", False) else None,
                           stats=net.stat_buffer.views if not self.server_based else None,
                           **algorithm_options(args))
        net.rebind(self.sync.params, self.sync.grads)
        self.guard = FiniteGuard(self, args.skip_nonfinite)
        self._setup_run()

    def _setup_run(self):
        """Watchdog, checkpoints (and resume), metrics, the opening log line."""
        args = self.args
        self.watchdog = Watchdog(self.comm, args.stall_timeout, args.stall_abort)
        self.checkpointer = ckpt.Checkpointer(args.checkpoint_dir, self.comm) \
            if args.checkpoint_dir else None
        if args.resume:
            self._resume()
        self.metrics = MetricsLog(args.metrics if self.main else None, resume=args.resume)
        if self.say:
            self._announce()

    def _build(self):
        args, data = self.args, self.data
        xp = self.backend.xp
        sizes = {k: getattr(args, k) for k in ("hidden", "channels", "lstm_cells", "dropout", "batchnorm")
                 if getattr(args, k) is not None}
        if args.init:
            arrays, header = model_io.load(args.init)
            saved = header.get("model", {})
            if tuple(saved.get("input_shape", ())) != tuple(data.input_shape):
                raise UsageError("%s expects inputs of shape %s, the data has %s" % (
                    args.init, tuple(saved.get("input_shape", ())), tuple(data.input_shape)))
            sizes = saved.get("sizes", sizes)
            args.model = saved.get("name", args.model)
            data.num_classes = saved.get("num_classes", data.num_classes)
        self.net = build_model(args.model, data.input_shape, data.num_classes, xp=xp,
                               seed=args.seed, **sizes)
        self.model_header = {"name": args.model, "input_shape": list(data.input_shape),
                             "num_classes": int(data.num_classes), "sizes": sizes,
                             "dtype": str(self.net.dtype)}
        if args.init:
            self.net.load_state_dict(arrays)
        lr = args.lr if args.lr is not None else default_lr(args, self.num_workers)
        opt_options = {"lr": lr, "weight_decay": args.weight_decay or None,
                       "clip": args.clip or None}
        if args.optimizer in ("momentum", "nesterov"):
            opt_options["momentum"] = args.momentum
        self.optimizer = create_optimizer(args.optimizer, **opt_options)
        self.schedule = Schedule(args.lr_schedule, lr, args.lr_decay, args.newbob_start,
                                 args.newbob_end, args.newbob_factor)
        self.sync_period = args.sync_period or default_sync_period(args)
        if (data.y_eval.size and int(data.y_eval.max()) >= data.num_classes) or \
                (data.y_train.size and int(data.y_train.max()) >= data.num_classes):
            raise UsageError("labels go up to %d but the model has %d outputs" % (
                max(int(data.y_eval.max(initial=0)), int(data.y_train.max(initial=0))),
                data.num_classes))
        self.x_train, self.y_train = xp.asarray(data.x_train), xp.asarray(data.y_train)
        self.x_eval, self.y_eval = xp.asarray(data.x_eval), xp.asarray(data.y_eval)

    def _announce(self):
        d, a = self.data, self.args
        kaldi_log("%s on %d ranks (%d workers%s), %s: %d params, %s data %d train / %d "
                  "held-out examples, backend %s" % (
                      a.algo, self.size, self.num_workers, ", rank 0 serves" if self.server_based
                      else "", a.model, self.net.num_params, d.name, d.total_train,
                      d.total_eval, self.backend.name), "setup")
        if any(d.skipped):
            kaldi_log("skipped utterances: %d with a label count that does not match their "
                      "frames, %d without targets" % d.skipped, "setup")

    # training ------------------------------------------------------------------------
    def run(self):
        self.setup()
        if self.args.cross_validate:
            loss, acc = self.evaluate()
            if self.main:
                kaldi_epoch_lines("held-out", loss, acc, self.data.total_eval)
            return {"test_loss": loss, "test_accuracy": acc}
        progress = Progress(self.args.progress, self.main and not self.server_based
                            or self.rank == (1 if self.server_based else 0))
        start = time.time() - self.wall_offset
        row = {}
        for epoch in range(self.start_epoch, self.args.epochs):
            self.epoch = epoch
            self.begin_epoch(epoch)
            self.optimizer.lr = self.schedule.lr
            if self.is_server:
                self.watchdog.serve(epoch, self.sync.syncs)
                self.server_totals.add(self.sync.run())
                train = (0.0, 0)
            else:
                train = self.train_epoch(epoch, progress)
            self.watchdog.epoch_end(epoch)
            row = self.end_epoch(epoch, train, time.time() - start)
            if self.checkpointer and ((epoch + 1) % self.args.checkpoint_every == 0
                                      or epoch + 1 == self.args.epochs):
                self.save_checkpoint(epoch, time.time() - start)
            self.watchdog.leave()
            if self.schedule.done:
                break
        progress.close()
        self.watchdog.close()
        self.finish()
        return row

    def begin_epoch(self, epoch):
        if epoch > self.start_epoch:
            self.sync.begin_round()  # server algorithms serve one run() per epoch
        else:
            self.guard.saved()  # what --skip-nonfinite falls back on before the first sync

    def train_epoch(self, epoch, progress):
        net, opt, sync = self.net, self.optimizer, self.sync
        w, g = net.param_buffer.data, net.grad_buffer.data
        batches = Minibatches(self.x_train, self.y_train, self.args.minibatch_size,
                              seed=self.args.seed * 100003 + self.worker_index, epoch=epoch)
        net.reset_state()
        # Dropout masks from (seed, worker, epoch) alone: a resumed run draws
        # exactly what the uninterrupted one drew, and workers differ.
        net.reseed([self.args.seed, self.worker_index, epoch])
        gradients_averaged = getattr(self.algorithm, "needs_grads", False)
        since, loss_sum, frames_seen = 0, 0.0, 0
        for xb, yb in batches:
            loss = net.loss_and_grad(xb, yb)
            frames = int((yb >= 0).sum()) if yb.ndim > 1 else len(yb)
            loss_sum += float(loss) * frames
            frames_seen += frames
            if gradients_averaged:
                frames = self.guard.check(g, frames)
                self.watchdog.enter(epoch, self.sync.syncs)
                more = sync.synchronize(frames)
                self.watchdog.leave()
                if not more:
                    return self._ended_early(epoch, loss_sum, frames_seen)
                opt.step(w, g)
            else:
                opt.step(w, g)
                since += frames
                if since >= self.sync_period:
                    if not self._sync(epoch, since):
                        return self._ended_early(epoch, loss_sum, frames_seen)
                    since = 0
            progress.update(epoch, self.args.epochs, batches.position, len(batches),
                            loss_sum / max(frames_seen, 1))
        self.watchdog.enter(epoch, self.sync.syncs)
        if gradients_averaged:
            sync.stop(0, step=lambda: opt.step(w, g))
        else:
            since = self.guard.check(w, since)
            sync.stop(since)
            self._after_sync()
        self.watchdog.leave()
        return loss_sum, frames_seen

    def _sync(self, epoch, n_k):
        n_k = self.guard.check(self.net.param_buffer.data, n_k)
        self.watchdog.enter(epoch, self.sync.syncs)
        more = self.sync.synchronize(n_k)
        self.watchdog.leave()
        self._after_sync()
        return more

    @staticmethod
    def _ended_early(epoch, loss_sum, frames_seen):
        """synchronize said all are done while this worker had data left: every
        worker still training dropped (--skip-nonfinite) at the same sync."""
        warnings.warn("epoch %d ends early: every worker still training dropped its "
                      "contribution to the same sync" % (epoch + 1))
        return loss_sum, frames_seen

    def _after_sync(self):
        if getattr(self.sync, "reset_local_state", False):
            self.optimizer.reset()
        self.guard.saved()

    # end of epoch ----------------------------------------------------------------------
    def end_epoch(self, epoch, train, wall):
        sums = np.array([train[0], train[1]], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        self.samples += int(sums[1])
        if self.server_based:
            self._average_stats_over_workers()
        test_loss, test_acc = self.evaluate()
        accepted = self.schedule.end_epoch(test_loss)
        self._keep_best(accepted)
        train_loss = sums[0] / sums[1] if sums[1] else float("nan")
        row = {"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
               "test_accuracy": test_acc, "samples": self.samples, "wall_seconds": wall,
               "lr": self.optimizer.lr, "syncs": self._syncs()}
        if self.main:
            self.metrics.write(row)
            if self.say:
                kaldi_log("epoch %d/%d: train loss %.4f, held-out loss %.4f, accuracy %.2f%%, "
                          "%d samples, %.1fs" % (epoch + 1, self.args.epochs, train_loss,
                                                 test_loss, 100 * test_acc, self.samples, wall),
                          "epoch")
                kaldi_epoch_lines("held-out", test_loss, test_acc, self.data.total_eval)
        return row

    def _syncs(self):
        return int(self.comm.allreduce(self.sync.syncs if not self.is_server else 0,
                                       op=MPI.MAX))

    def _average_stats_over_workers(self):
        stats = self.net.stat_buffer
        if stats.size == 0:
            return
        s = stats.data
        s *= s.dtype.type(0.0 if self.is_server else 1.0 / self.num_workers)
        mpi.Exchange(self.comm, stats).allreduce()

    def _reference_model(self):
        """Swap the model to evaluate into the parameters: the server's center
        under a server algorithm (workers keep their own model aside)."""
        if not self.server_based:
            return None
        w = self.net.param_buffer.data
        mine = None if self.is_server else w.copy()
        mpi.Exchange(self.comm, self.net.param_buffer).bcast(0)
        return mine

    def evaluate(self):
        mine = self._reference_model()
        sums = np.zeros(3)
        if len(self.y_eval):
            loss, acc = self.net.evaluate(self.x_eval, self.y_eval)
            frames = int((self.y_eval >= 0).sum())
            sums[:] = (loss * frames, acc * frames, frames)
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        if mine is not None:
            self.net.param_buffer.data[...] = mine
        if sums[2] == 0:
            return float("nan"), float("nan")
        return sums[0] / sums[2], sums[1] / sums[2]

    def _keep_best(self, accepted):
        """newbob rejects an epoch that made the held-out loss worse: every rank
        returns to the best model (a copy kept only under newbob)."""
        if self.args.lr_schedule != "newbob":
            return
        w = self.net.param_buffer.data
        if accepted:
            self.best = w.copy()
        elif self.best is not None:
            w[...] = self.best
            if self.say:
                kaldi_log("epoch rejected, back to the best model, lr %g" % self.schedule.lr)

    # outputs -----------------------------------------------------------------------------
    def header(self):
        return {"model": self.model_header, "config": {
            k: v for k, v in vars(self.args).items() if isinstance(v, (int, float, str, bool))
            or v is None}, "algorithm_options": self.sync.options}

    def finish(self):
        """The final model: rank 0's (w_g, or the server's center)."""
        if self.is_server and self.say:
            kaldi_log(self.server_totals.line(), "finish")
        dropped = self.comm.allreduce(self.guard.dropped, op=MPI.SUM)
        if dropped and self.main:  # even with --quiet: the model lacks their work
            kaldi_log("dropped %d non-finite contribution(s) (--skip-nonfinite)" % dropped)
        if self.args.out and self.main:
            model_io.save(self.args.out, self.net.state_dict(), self.header())
            if self.say:
                kaldi_log("wrote %s" % self.args.out, "finish")
        if self.args.plot and self.main and self.metrics.rows:
            from .plot import plot_curves
            plot_curves(self.metrics.rows, self.args.plot, "psgd %s, %d ranks" % (
                self.args.algo, self.size))

    def save_checkpoint(self, epoch, wall):
        arrays = ckpt.join("net", self.net.state_dict())
        arrays.update(ckpt.join("opt", _host_state(self.optimizer.state_dict())))
        arrays.update(ckpt.join("algo", self.sync.state_dict()))
        if self.best is not None:
            arrays["best"] = self.backend.to_host(self.best)
        header = dict(self.header(), samples=self.samples, wall=wall,
                      schedule=self.schedule.state())
        self.checkpointer.save(epoch, arrays, header)

    def _load_checkpoint(self, check=None):
        """Collective: (arrays, header) of this rank's latest checkpoint, or
        None when some rank has none; `check(state)` may refuse it."""
        error, state = None, None
        try:
            state = self.checkpointer.load()
            if state is not None and check is not None:
                check(state)
        except UsageError as exc:
            error = exc
        mpi.agree(self.comm, error)
        found = self.comm.allreduce(int(state is not None), op=MPI.MIN)
        if not found:
            if self.say:
                kaldi_log("no checkpoint in %s: starting afresh" % self.args.checkpoint_dir)
            return None
        return state

    def _resume(self):
        state = self._load_checkpoint()
        if state is None:
            return
        arrays, header = state
        self.net.load_state_dict(ckpt.split(arrays, "net"))
        self.optimizer.load_state_dict(_from_host(ckpt.split(arrays, "opt")))
        self.sync.load_state_dict(ckpt.split(arrays, "algo"))
        if "best" in arrays:
            self.best = self.backend.xp.asarray(arrays["best"])
        self.schedule.load(header["schedule"])
        self.start_epoch, self.samples = header["epoch"] + 1, header["samples"]
        self.wall_offset = header["wall"]
        if self.say:
            kaldi_log("resumed from epoch %d of %s" % (header["epoch"] + 1,
                                                      self.args.checkpoint_dir))


def _host_state(state):
    out = {}
    for k, v in state.items():
        if v is None:  # an unallocated slot: absent from the file, None again on load
            continue
        out[k] = v.get() if hasattr(v, "get") and not isinstance(v, np.ndarray) else np.asarray(v)
    return out


def _from_host(arrays):
    return {k: (v.item() if v.ndim == 0 else v) for k, v in arrays.items()}
