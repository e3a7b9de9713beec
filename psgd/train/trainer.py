"""The training loop: each rank trains its shard and synchronizes through
the chosen algorithm; rank 0 serves under a server algorithm. Epochs end
together: the workers fold in their last block (stop), the held-out set is
evaluated in shares on every rank, and rank 0 logs and writes the model."""
import os
import time

import numpy as np
from mpi4py import MPI

from .. import agreement, cuda_aware, mpi, nccl, trace
from ..backend import get_backend, to_numpy
from ..errors import UsageError
from ..nnet import create_optimizer, momentum_option
from . import checkpoint as ckpt
from . import consistency, model_files, outputs, resize
from .data_parallel import DataParallel
from .data_setup import combine, read_local
from .faults import Watchdog
from .idle_flags import refuse_idle_flags
from .metrics import Progress, kaldi_epoch_lines, kaldi_log
from .large_batch import warmup_factor
from .defaults import (default_lr, local_momentum, lr_rule_name, lr_scale, lr_schedule,
                       warmup_epochs)
from .schedule import Schedule
from . import straggler
from .stall_report import Names
from .timeline import Timeline, read_events


class Trainer(mpi.Closeable):
    """The epoch loop, the schedule, newbob's best model, checkpoints,
    metrics and outputs. How a step and a sync happen is the business of
    one collaborator, `self.parallel` (DataParallel here; HybridTrainer
    uses hybrid.ModelParallel): roles, build, begin_epoch, train_epoch,
    evaluate, model/rollback, syncs, checkpoint state and the final model."""

    parallelism = DataParallel

    def __init__(self, args, comm=None):
        self.args = args
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        # Ranks started with different flags (an MPMD launch, a wrapper that
        # edits the command line per host) would train different data or
        # epoch ranges and hang at the first collective that differs.
        agreement.check_same(self.comm, consistency.flags(args), "a flag")
        self.parallel = self.parallelism(args, self.comm)
        self.main = self.rank == 0
        self.say = self.main and not args.quiet
        self.start_epoch, self.samples, self.best = 0, 0, None
        self.wall_offset = 0.0

    def close(self):
        """Collective: free the communicators this trainer duplicated (its
        own, the algorithm's or the network's, the watchdog's)."""
        if self.comm is None:
            return
        watchdog = getattr(self, "watchdog", None)
        if watchdog is not None:
            watchdog.close()
        timeline = getattr(self, "timeline", None)
        if timeline is not None:
            timeline.close()
        lock = getattr(self, "outputs_lock", None)
        if lock is not None:
            lock.release()      # a later run in this process may use the directory
            self.outputs_lock = None
        self.parallel.close()
        self.comm.Free()
        self.comm = None

    # who this rank is (the collaborator decides) ----------------------------------------
    @property
    def server_based(self):
        return self.parallel.server_based

    @property
    def is_server(self):
        return self.parallel.is_server

    @property
    def num_workers(self):
        return self.parallel.num_workers

    @property
    def worker_index(self):
        return self.parallel.worker_index

    @property
    def sync(self):
        """The synchronization algorithm (data-parallel runs)."""
        return getattr(self.parallel, "sync", None)

    # set-up ------------------------------------------------------------------------
    def setup(self):
        args, error, local = self.args, None, None
        try:
            self.parallel.check()
            node = mpi.Node(self.comm)
            self.backend = get_backend(args.backend, node.local_rank, args.gpu_ids,
                                       node.local_size)
            refuse_idle_flags(args, self.backend.name)
            cuda_aware.configure(args.cuda_aware)
            nccl.configure(args.exchange)
            local = read_local(args, self.rank, self.size, self.worker_index, self.num_workers)
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        agreement.agree(self.comm, error)
        self.data = combine(args, self.comm, local, self.worker_index,
                            sequences=args.model == "lstm")
        error = None
        try:
            self._build()
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        agreement.agree(self.comm, error)
        self.net, self.optimizer = self.parallel.build(self.net, self.optimizer, self.backend,
                                                         self.data)
        self._setup_run()

    def _setup_run(self):
        """Watchdog, checkpoints (and resume), metrics, the opening log line."""
        args = self.args
        self.outputs_lock = outputs.prepare(self.comm, args, self.main, self.data)
        consistency.warn_unused_gpu_ids(args, self.backend.name, self.main)
        self.hosts = mpi.host_names(self.comm)
        self.watchdog = Watchdog(self.comm, args.stall_timeout, args.stall_abort,
                                 hosts=self.hosts)
        self.checkpointer = ckpt.Checkpointer(args.checkpoint_dir, self.comm) \
            if args.checkpoint_dir else None
        if args.resume:
            self._resume()
        elif self.checkpointer:
            self.checkpointer.refuse_to_overwrite()
        self.metrics = outputs.open_metrics(self.comm, args.metrics if self.main else None,
                                            self.start_epoch)
        self._start_timeline()
        if self.say:
            self._announce()
            if self.backend.is_gpu:
                kaldi_log(nccl.describe() or cuda_aware.describe(), "setup")

    def _start_timeline(self):
        """Collective: the recorder (and, after --resume, the trace so far)."""
        path, error, keep = self.args.timeline, None, ()
        if path and self.main and self.args.resume:
            try:
                keep = read_events(path)
            except UsageError as exc:
                error = exc
        agreement.agree(self.comm, error)
        self.timeline = Timeline(self.comm, path, self.hosts,
                                 getattr(self.parallel, "servers", 0), keep)

    def _build(self):
        """The whole model (identical on every rank for one seed), the local
        optimizer, the schedule and the data arrays."""
        args, data = self.args, self.data
        xp = self.backend.xp
        self.net, self.model_header = model_files.build_network(args, data, xp)
        self.lr_scale = lr_scale(args, self.num_workers)   # the large-batch rule's k
        lr = (args.lr if args.lr is not None else default_lr(args, self.num_workers)) * self.lr_scale
        opt_options = {"lr": lr, "weight_decay": args.weight_decay or None,
                       "clip": args.clip or None}
        momentum = args.momentum if args.momentum is not None else \
            local_momentum(args, self.num_workers)
        if momentum is not None:
            opt_options[momentum_option(args.optimizer)] = momentum
        self.optimizer = create_optimizer(args.optimizer, **opt_options)
        self.schedule = Schedule(lr_schedule(args, self.num_workers), lr, args.lr_decay,
                                 args.newbob_start, args.newbob_end, args.newbob_factor)
        if (data.y_eval.size and int(data.y_eval.max()) >= data.num_classes) or \
                (data.y_train.size and int(data.y_train.max()) >= data.num_classes):
            raise UsageError("labels go up to %d but the model has %d outputs" % (
                max(int(data.y_eval.max(initial=0)), int(data.y_train.max(initial=0))),
                data.num_classes))
        self.x_train, self.y_train = xp.asarray(data.x_train), xp.asarray(data.y_train)
        self.x_eval, self.y_eval = xp.asarray(data.x_eval), xp.asarray(data.y_eval)

    def _announce(self):
        d = self.data
        kaldi_log(self.parallel.announcement(self.net, d, self.backend), "setup")
        if len(set(self.hosts)) > 1:
            kaldi_log("on " + mpi.describe_hosts(self.hosts), "setup")
        options, term = self.optimizer.options, momentum_option(self.args.optimizer)
        momentum = " %s %g" % (term, options[term]) if term in options else ""
        rule = "" if self.lr_scale == 1 else \
            " (%s rule: x%.2f for %d workers, reached after %d warm-up epochs)" % (
                lr_rule_name(self.args), self.lr_scale, self.num_workers, warmup_epochs(self.args))
        kaldi_log("%s lr %g%s%s%s" % (self.args.optimizer, self.schedule.lr, momentum, rule,
                                      self.schedule.describe(self.args.epochs)), "setup")
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
        progress = Progress(self.args.progress, self.worker_index == 0)
        start = time.time() - self.wall_offset
        row = {}
        for epoch in range(self.start_epoch, self.args.epochs):
            self.epoch = epoch
            self.parallel.begin_epoch(epoch, first=epoch == self.start_epoch)
            self.optimizer.lr = self.schedule.lr * self.schedule.fraction(epoch, self.args.epochs) \
                * warmup_factor(epoch, self.lr_scale, warmup_epochs(self.args))
            train = self.train_epoch(epoch, progress)
            self.timeline.arrive()
            self.watchdog.epoch_end(epoch)
            row = self.end_epoch(epoch, train, time.time() - start)
            if self.checkpointer and ((epoch + 1) % self.args.checkpoint_every == 0
                                      or epoch + 1 == self.args.epochs):
                self.save_checkpoint(epoch, time.time() - start)
            self.watchdog.leave()
            self.timeline.next_epoch()
            if self.schedule.done:
                break
        progress.close()
        self.watchdog.close()
        self.finish()
        return row

    def train_epoch(self, epoch, progress):
        """(loss sum, frames) of this rank's epoch (the server serves it)."""
        return self.parallel.train_epoch(epoch, (self.x_train, self.y_train), progress,
                                         self.watchdog)

    # end of epoch ----------------------------------------------------------------------
    def end_epoch(self, epoch, train, wall):
        sums = np.array([train[0], train[1]], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        self.timeline.met(epoch)
        self.samples += int(sums[1])
        evaluating = trace.now()
        test_loss, test_acc = self.evaluate()
        self.timeline.span(trace.EVALUATE, evaluating)
        found = self.timeline.fold()
        accepted = self.schedule.end_epoch(test_loss)
        self._keep_best(accepted)
        train_loss = sums[0] / sums[1] if sums[1] else float("nan")
        row = {"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
               "test_accuracy": test_acc, "samples": self.samples, "wall_seconds": wall,
               "lr": self.optimizer.lr, "syncs": self.parallel.syncs()}
        if self.is_server:
            row.update(self.parallel.server_totals.epoch_row())
        if found is not None:
            row.update(straggler_rank=found[0], straggler_wait_s=found[1],
                       straggler_share=found[2])
        if self.main:
            self.metrics.write(row)
            if self.say:
                held_out = ("held-out loss %.4f, accuracy %.2f%%" % (test_loss, 100 * test_acc)
                            if self.data.total_eval else "no held-out set")
                kaldi_log("epoch %d/%d: train loss %.4f, %s, %d samples, %.1fs" % (
                    epoch + 1, self.args.epochs, train_loss, held_out, self.samples, wall),
                    "epoch")
                if self.data.total_eval:
                    kaldi_epoch_lines("held-out", test_loss, test_acc, self.data.total_eval)
        return row

    def evaluate(self):
        """Collective: (loss, accuracy) on the held-out set."""
        return self.parallel.evaluate(self.x_eval, self.y_eval)

    def _keep_best(self, accepted):
        """newbob rejects an epoch that made the held-out loss worse: every rank
        returns to the best model (a copy kept only under newbob)."""
        if self.args.lr_schedule != "newbob":
            return
        if accepted:
            self.best = self.parallel.model().copy()
        elif self.best is not None:
            self.parallel.rollback(self.best)
            if self.say:
                kaldi_log("epoch rejected, back to the best model, lr %g" % self.schedule.lr)

    # outputs -----------------------------------------------------------------------------
    def header(self):
        return dict({"model": self.model_header, "config": {
            k: v for k, v in vars(self.args).items() if isinstance(v, (int, float, str, bool))
            or v is None}}, **self.parallel.header())

    def finish(self):
        """The final model: rank 0's (w_g, the server's center, or the
        gathered model-parallel network)."""
        state = self.parallel.final_state()
        self.parallel.closing_lines(self.say, self.main)
        if self.args.out and self.main:
            model_files.save_model(self.args.out, state, self.header(), self.data,
                                   binary=self.args.binary)
            if self.say:
                kaldi_log("wrote %s" % self.args.out, "finish")
        summary = self.parallel.summary()
        if summary and self.say:
            kaldi_log(summary, "finish")
        self.timeline.fold()
        if self.say:
            kaldi_log(straggler.line(Names(self.hosts),
                                     self.timeline.run_straggler()), "finish")
        self.timeline.write()
        if self.args.plot and self.main and self.metrics.rows:
            from .plot import plot_curves
            plot_curves(self.metrics.rows, self.args.plot, "psgd %s, %d ranks" % (
                self.parallel.title(), self.size))

    def save_checkpoint(self, epoch, wall):
        arrays, extra = self.parallel.checkpoint_state()
        arrays.update(ckpt.join("opt", _host_state(self.optimizer.state_dict())))
        if self.best is not None:
            arrays["best"] = self.backend.to_host(self.best)
        header = dict(self.header(), samples=self.samples, wall=wall,
                      schedule=self.schedule.state(), **extra)
        saving = trace.now()
        self.checkpointer.save(epoch, arrays, header)
        self.timeline.span(trace.CHECKPOINT, saving, {"epoch": epoch + 1})
        self.timeline.write()      # a job killed later leaves the trace up to here

    def _load_checkpoint(self, check=None):
        """Collective: (arrays, header) of this rank's checkpoint to resume
        from, or None when the directory holds none; `check(state)` may
        refuse it."""
        found = self.checkpointer.find()
        if found is None:
            if self.say:
                kaldi_log("no checkpoint in %s: starting afresh" % self.args.checkpoint_dir)
            return None
        folder, state = found
        error = None
        try:
            if check is not None:
                check(state)
            consistency.reconcile_resume(self.args, state[0], state[1], self.say)
        except UsageError as exc:
            error = exc
        agreement.agree(self.comm, error)
        if self.say and self.checkpointer.latest_folder() is None:
            kaldi_log("--resume: %s has no %s: resuming from %s, the newest checkpoint every "
                      "rank's file completes" % (self.args.checkpoint_dir, ckpt.LATEST,
                                                 os.path.basename(folder)), "setup")
        return folder, state

    def _resume(self):
        found = self._load_checkpoint(self.parallel.check_checkpoint)
        if found is None:
            return
        folder, (arrays, header) = found
        layout = self.parallel.layout(header, self.args)
        saved_opt = _from_host(ckpt.split(arrays, "opt"))
        if layout is not None and layout.changed:
            self.parallel.load_resized(self.checkpointer, folder, arrays, layout)
            saved_opt = resize.optimizer_state(self.optimizer, saved_opt, self.args, layout,
                                               self.parallel.gradients_averaged)
        else:
            self.parallel.load_checkpoint(arrays, header)
        self.optimizer.load_state_dict(saved_opt)
        if "best" in arrays:
            self.best = self.backend.xp.asarray(arrays["best"])
        self.schedule.load(header["schedule"])
        if layout is not None and layout.changed:
            self._resized(layout, header)
        self.start_epoch, self.samples = header["epoch"] + 1, header["samples"]
        self.wall_offset = header["wall"]
        if self.say:
            kaldi_log("resumed from epoch %d of %s" % (header["epoch"] + 1,
                                                      self.args.checkpoint_dir))


    def _resized(self, layout, header):
        """The schedule's rate of this N, and rank 0's lines on what changed."""
        lr = self.schedule.lr
        self.schedule.lr = resize.rescaled_lr(lr, self.args, layout)
        changes = [("lr", lr, self.schedule.lr)] if self.schedule.lr != lr else []
        changes += resize.momentum_change(self.optimizer, self.args, layout)
        changes += resize.option_changes(header.get("algorithm_options", {}), self.sync.options)
        if self.say:
            for line in resize.log_lines(layout, self.sync, self.parallel.algorithm,
                                         self.parallel.gradients_averaged, changes):
                kaldi_log(line, "setup")


def _host_state(state):
    out = {}
    for k, v in state.items():
        if v is None:  # an unallocated slot: absent from the file, None again on load
            continue
        out[k] = to_numpy(v)
    return out


def _from_host(arrays):
    return {k: (v.item() if v.ndim == 0 else v) for k, v in arrays.items()}
