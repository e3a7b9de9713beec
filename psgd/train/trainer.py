"""The training loop: each rank trains its shard and synchronizes through
the chosen algorithm; rank 0 serves under a server algorithm. Epochs end
together: the workers fold in their last block (stop), the held-out set is
evaluated in shares on every rank, and rank 0 logs and writes the model."""
import contextlib
import os
import time

import numpy as np
from mpi4py import MPI

from .. import agreement, cuda_aware, mpi, nccl, trace
from ..backend import get_backend
from ..errors import CollectiveUsageError, UsageError
from ..nnet import momentum_option
from . import checkpoint as ckpt
from . import consistency, model_files, resize, whole_model
from . import outputs as output_files
from .config import resolve
from .data_parallel import DataParallel
from .data_setup import combine, read_local
from .faults import Watchdog
from .idle_flags import refuse_idle_flags
from .metrics import Progress, kaldi_epoch_lines, kaldi_log
from .large_batch import warmup_factor
from .schedule import Schedule
from . import straggler
from .survival import refuse_unless_possible, survival
from .stall_report import Names
from .timeline import Timeline, read_events


class Trainer(mpi.Closeable):
    """The epoch loop, the schedule, newbob's best model, checkpoints,
    metrics and outputs, over a Config resolved once (config.py). How a
    step and a sync happen is the business of one collaborator,
    `self.parallel` (DataParallel here; HybridTrainer uses
    hybrid.ModelParallel), which builds and owns the network, its optimizer
    and the data arrays: roles, build, begin_epoch, train_epoch, evaluate,
    model/rollback, syncs, checkpoint state and the final model."""

    parallelism = DataParallel

    def __init__(self, args, comm=None, handoff=None):
        """`args`: validated flags (the CLI parser's or make_config's);
        `handoff`: what a job that lost workers goes on from (survival.py)."""
        comm = comm if comm is not None else MPI.COMM_WORLD
        # Ranks started with different flags (an MPMD launch, a wrapper that
        # edits the command line per host) would train different data or
        # epoch ranges and hang at the first collective that differs.
        agreement.check_same(comm, consistency.flags(args), "a flag")
        try:
            self.config = resolve(args, comm.Get_size())
            refuse_unless_possible(self.config)
        except UsageError as exc:   # flags and size are the same on every rank
            raise CollectiveUsageError(str(exc)) from None
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.parallel = self.parallelism(self.config, self.comm)
        self.handoff, self.survival = handoff, None
        if handoff is not None and handoff.server_totals is not None:
            self.parallel.server_totals = handoff.server_totals
            handoff.server_totals.carry_on()
        self.main = self.rank == 0
        self.say = self.main and not self.config.outputs.quiet
        # what setup() makes
        self.backend = self.data = self.schedule = None
        self.outputs_lock = self.hosts = self.watchdog = self.checkpointer = None
        self.metrics = self.timeline = None
        self.start_epoch, self.samples, self.best = 0, 0, None
        self.wall_offset = 0.0

    def close(self):
        """Collective: free the communicators this trainer duplicated (its
        own, the algorithm's or the network's, the watchdog's)."""
        if self.comm is None:
            return
        if self.watchdog is not None:
            self.watchdog.close()
        if self.timeline is not None:
            self.timeline.close()
        if self.outputs_lock is not None:
            self.outputs_lock.release()   # a later run in this process may use the directory
            self.outputs_lock = None
        self.parallel.close()
        self.comm.Free()
        self.comm = None

    # set-up ------------------------------------------------------------------------
    def setup(self):
        config, error, local = self.config, None, None
        try:
            self.parallel.check()
            s = config.schedule
            self.schedule = Schedule(s.lr_schedule, config.optimizer.lr, s.lr_decay,
                                     s.newbob_start, s.newbob_end, s.newbob_factor)
            node = mpi.Node(self.comm)
            runtime = config.runtime
            self.backend = get_backend(runtime.backend, node.local_rank, runtime.gpu_ids,
                                       node.local_size)
            refuse_idle_flags(config, self.backend.name)
            cuda_aware.configure(runtime.cuda_aware)
            nccl.configure(runtime.exchange)
            local = read_local(config, self.rank, self.parallel.worker_index)
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        agreement.agree(self.comm, error)
        self.data = combine(config, self.comm, local, self.parallel.worker_index,
                            sequences=config.model.model == "lstm")
        self.parallel.build(self.backend, self.data)
        self._setup_run()

    def _setup_run(self):
        """Watchdog, checkpoints (and resume), metrics, the opening log line."""
        outputs = self.config.outputs
        self.outputs_lock = output_files.prepare(self.comm, self.config, self.main, self.data)
        consistency.warn_unused_gpu_ids(self.config.runtime.gpu_ids, self.backend.name,
                                        self.main)
        self.hosts = mpi.host_names(self.comm)
        faults = self.config.faults
        self.survival = survival(self.config, self.comm, self.hosts)
        self.watchdog = Watchdog(self.comm, faults.stall_timeout, faults.stall_abort,
                                 hosts=self.hosts, lossy=self.survival is not None)
        self.checkpointer = ckpt.Checkpointer(outputs.checkpoint_dir, self.comm) \
            if outputs.checkpoint_dir else None
        if self.handoff is not None:
            # even with --quiet: the model lacks what the dead worker did
            self.survival.say_lost(self.handoff, self.size, self.main)
        if outputs.resume or self.handoff is not None:
            self._resume()
        elif self.checkpointer:
            self.checkpointer.refuse_to_overwrite()
        self.metrics = output_files.open_metrics(self.comm, outputs.metrics if self.main else None,
                                                 self.start_epoch)
        self._start_timeline()
        if self.say:
            self._announce()
            if self.backend.is_gpu:
                kaldi_log(nccl.describe() or cuda_aware.describe(), "setup")

    def _start_timeline(self):
        """Collective: the recorder (and, after --resume, the trace so far)."""
        path, error, keep = self.config.outputs.timeline, None, ()
        if path and self.main and self.config.outputs.resume:
            try:
                keep = read_events(path)
            except UsageError as exc:
                error = exc
        agreement.agree(self.comm, error)
        self.timeline = Timeline(self.comm, path, self.hosts, self.config.run.servers, keep)

    def _announce(self):
        d, opt = self.data, self.config.optimizer
        kaldi_log(self.parallel.announcement(d, self.backend), "setup")
        choices = self.parallel.choices()
        if choices:
            kaldi_log(choices, "setup")
        if len(set(self.hosts)) > 1:
            kaldi_log("on " + mpi.describe_hosts(self.hosts), "setup")
        options, term = self.parallel.optimizer.options, momentum_option(opt.optimizer)
        momentum = " %s %g" % (term, options[term]) if term in options else ""
        rule = "" if opt.lr_scale == 1 else \
            " (%s rule: x%.2f for %d workers, reached after %d warm-up epochs)" % (
                opt.lr_rule, opt.lr_scale, self.config.run.num_workers, opt.warmup_epochs)
        kaldi_log("%s lr %g%s%s%s" % (opt.optimizer, self.schedule.lr, momentum, rule,
                                      self.schedule.describe(self.config.run.epochs)), "setup")
        if any(d.skipped):
            kaldi_log("skipped utterances: %d with a label count that does not match their "
                      "frames, %d without targets" % d.skipped, "setup")

    # training ------------------------------------------------------------------------
    def run(self):
        self.setup()
        if self.config.run.cross_validate:
            loss, acc = self.parallel.evaluate()
            if self.main:
                kaldi_epoch_lines("held-out", loss, acc, self.data.total_eval)
            return {"test_loss": loss, "test_accuracy": acc}
        run, opt = self.config.run, self.config.optimizer
        progress = Progress(self.config.outputs.progress, self.parallel.worker_index == 0)
        start = time.time() - self.wall_offset
        row = {}
        if self.handoff is not None:        # the end of the epoch that lost workers, again
            h = self.handoff
            start = h.started               # the job's wall clock goes on through the handover
            with self._surviving("epoch_end", h.epoch, h.train, h.lr, time.time() - start):
                row = self.end_epoch(h.epoch, h.train, time.time() - start, h.lr, h.syncs)
                self._checkpoint_if_due(h.epoch, start)
        for epoch in range(self.start_epoch, run.epochs):
            lr = self.schedule.lr * self.schedule.fraction(epoch, run.epochs) * \
                warmup_factor(epoch, opt.lr_scale, opt.warmup_epochs)
            self.parallel.begin_epoch(epoch, epoch == self.start_epoch, lr, self.say)
            with self._surviving("training", epoch):
                train = self.parallel.train_epoch(epoch, progress, self.watchdog)
            with self._surviving("epoch_end", epoch, train, lr, time.time() - start):
                self.timeline.arrive()
                self.watchdog.epoch_end(epoch)
                row = self.end_epoch(epoch, train, time.time() - start, lr)
                self._checkpoint_if_due(epoch, start)
            self.watchdog.leave()
            self.timeline.next_epoch()
            if self.schedule.done:
                break
        progress.close()
        with self._surviving("job_end"):
            self.watchdog.close()
            self.finish()
        return row

    def _surviving(self, stage, *args):
        """Where a job that survives workers' deaths checks for them
        (survival.py): an epoch's training, the end of an epoch (its
        collectives) and the job's last collectives."""
        if self.survival is None:
            return contextlib.nullcontext()
        return getattr(self.survival, stage)(self, *args)

    def _checkpoint_if_due(self, epoch, start):
        if self.checkpointer and ((epoch + 1) % self.config.outputs.checkpoint_every == 0
                                  or epoch + 1 == self.config.run.epochs):
            self.save_checkpoint(epoch, time.time() - start)

    def abandon(self, lost):
        """This trainer's job lost ranks `lost` and goes on in a new one
        (survival.py): stop what runs, free nothing collectively (the dead
        would never join), release the outputs for the new trainer."""
        self.watchdog.abandon(lost)
        if self.outputs_lock is not None:
            self.outputs_lock.release()
            self.outputs_lock = None
        self.parallel.abandon()
        self.comm = None

    # end of epoch ----------------------------------------------------------------------
    def end_epoch(self, epoch, train, wall, lr, syncs=None):
        """Collective: the epoch's metrics row (`syncs`: the epoch's count
        when the algorithm that made them is gone)."""
        sums = np.array([train[0], train[1]], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        self.timeline.met(epoch)
        self.samples += int(sums[1])
        evaluating = trace.now()
        test_loss, test_acc = self.parallel.evaluate()
        self.timeline.span(trace.EVALUATE, evaluating)
        found = self.timeline.fold()
        accepted = self.schedule.end_epoch(test_loss)
        self._keep_best(accepted)
        train_loss = sums[0] / sums[1] if sums[1] else float("nan")
        row = {"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
               "test_accuracy": test_acc, "samples": self.samples, "wall_seconds": wall,
               "lr": lr, "syncs": self.parallel.syncs() if syncs is None else syncs}
        if self.parallel.is_server:
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
                    epoch + 1, self.config.run.epochs, train_loss, held_out, self.samples,
                    wall),
                    "epoch")
                if self.data.total_eval:
                    kaldi_epoch_lines("held-out", test_loss, test_acc, self.data.total_eval)
        return row

    def _keep_best(self, accepted):
        """newbob rejects an epoch that made the held-out loss worse: every rank
        returns to the best model (a copy kept only under newbob)."""
        if self.config.schedule.lr_schedule != "newbob":
            return
        if accepted:
            self.best = self.parallel.model().copy()
        elif self.best is not None:
            self.parallel.rollback(self.best)
            if self.say:
                kaldi_log("epoch rejected, back to the best model, lr %g" % self.schedule.lr)

    # outputs -----------------------------------------------------------------------------
    def recorded_flags(self):
        """The flags a checkpoint or model file records (and a resumed run is
        compared with): as given, with the model trained (--init's file's)."""
        return self.config.namespace(
            model=whole_model.model_name(self.parallel.model_header, self.config))

    def header(self):
        return dict({"model": self.parallel.model_header, "config": {
            k: v for k, v in vars(self.recorded_flags()).items()
            if isinstance(v, (int, float, str, bool)) or v is None}}, **self.parallel.header())

    def finish(self):
        """The final model: rank 0's (w_g, the server's center, or the
        gathered model-parallel network)."""
        state = self.parallel.final_state()
        outputs = self.config.outputs
        # written before the closing collectives: a worker that dies in them
        # (--survive-worker-loss) costs the job its last lines, not its model
        if outputs.out and self.main:
            model_files.save_model(outputs.out, state, self.header(), self.data,
                                   binary=outputs.binary)
            if self.say:
                kaldi_log("wrote %s" % outputs.out, "finish")
        self.parallel.closing_lines(self.say, self.main)
        summary = self.parallel.summary()
        if summary and self.say:
            kaldi_log(summary, "finish")
        self.timeline.fold()
        if self.say:
            kaldi_log(straggler.line(Names(self.hosts),
                                     self.timeline.run_straggler()), "finish")
        self.timeline.write()
        if outputs.plot and self.main and self.metrics.rows:
            from .plot import plot_curves
            plot_curves(self.metrics.rows, outputs.plot, "psgd %s, %d ranks" % (
                self.parallel.title(), self.size))

    def save_checkpoint(self, epoch, wall):
        arrays, extra = self.parallel.checkpoint_state()
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
        refuse it. After a loss of workers: rank 0's state, handed over."""
        if self.handoff is not None:
            return None, (self.handoff.arrays, self.handoff.header)
        found = self.checkpointer.find()
        if found is None:
            if self.say:
                kaldi_log("no checkpoint in %s: starting afresh"
                          % self.config.outputs.checkpoint_dir)
            return None
        folder, state = found
        error = None
        try:
            if check is not None:
                check(state)
            consistency.reconcile_resume(self.recorded_flags(), state[0], state[1], self.say)
        except UsageError as exc:
            error = exc
        agreement.agree(self.comm, error)
        if self.say and self.checkpointer.latest_folder() is None:
            kaldi_log("--resume: %s has no %s: resuming from %s, the newest checkpoint every "
                      "rank's file completes" % (self.config.outputs.checkpoint_dir, ckpt.LATEST,
                                                 os.path.basename(folder)), "setup")
        return folder, state

    def _resume(self):
        found = self._load_checkpoint(self.parallel.check_checkpoint)
        if found is None:
            return
        folder, (arrays, header) = found
        layout = self.parallel.layout(header)
        if layout is not None and layout.changed:
            self.parallel.load_resized(self.checkpointer, folder, arrays, layout)
        else:
            self.parallel.load_checkpoint(arrays, header)
        if "best" in arrays:
            self.best = self.backend.xp.asarray(arrays["best"])
        self.schedule.load(header["schedule"],
                           consistency.resumed_schedule(self.recorded_flags(), header))
        if layout is not None and layout.changed:
            self._resized(layout, header)
        self.start_epoch, self.samples = header["epoch"] + 1, header["samples"]
        self.wall_offset = header["wall"]
        if self.say and self.handoff is None:
            kaldi_log("resumed from epoch %d of %s" % (header["epoch"] + 1,
                                                      self.config.outputs.checkpoint_dir))

    def _resized(self, layout, header):
        """The schedule's rate of this N, and rank 0's lines on what changed."""
        lr = self.schedule.lr
        self.schedule.lr = resize.rescaled_lr(lr, layout)
        p = self.parallel
        changes = [("lr", lr, self.schedule.lr)] if self.schedule.lr != lr else []
        changes += resize.option_changes(header.get("algorithm_options", {}), p.sync.options)
        if self.say:
            for line in resize.log_lines(layout, p.sync, p.algorithm, p.gradients_averaged,
                                         changes):
                kaldi_log(line, "setup")

