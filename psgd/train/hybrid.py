"""--model-parallel: the training loop of the hybrid network
(psgd/nnet/parallel): the layers before the first fully connected one run
data-parallel, the fully connected layers are sliced by output units across
the ranks. The network does all the communication itself, so there is no
synchronization algorithm (--algo and its options are ignored).

Every rank reads its own shard; a step takes B/N samples from each, so it
trains on a global minibatch of B = --minibatch-size. All ranks take the
same number of steps with the same row count: an epoch is ceil(n_min / (B/N))
steps, n_min the smallest shard, and the one extra example a longer shard
may hold is skipped that epoch (the order is reshuffled every epoch).

HybridTrainer is a Trainer: set-up, the step, evaluation, checkpoints and
outputs are its own; the epoch loop, the end-of-epoch metrics and log lines,
the schedule and newbob's best-model keeping are the Trainer's. Checkpoints:
rank 0's file holds the gathered single-process model ("net/"), every rank's
its own optimizer state; --out is the gathered model, loadable by a
single-process run. The last log line compares the bytes moved per step with
what data-parallel gradient averaging of the same network would move.
"""
import math
import warnings

import numpy as np
from mpi4py import MPI

from .. import mpi
from ..backend import get_backend
from ..data import Minibatches
from ..errors import UsageError
from ..nnet import create_optimizer
from ..nnet.parallel import HybridNetwork, requirements, traffic
from ..nnet.parallel.network import hidden_widths
from . import checkpoint as ckpt
from . import model_io
from .data_setup import combine, read_local
from .faults import NonFiniteError
from .metrics import kaldi_log
from .trainer import Trainer, _from_host, _host_state

MODELS = ("cnn", "mlp")


class HybridTrainer(Trainer):
    def __init__(self, args, comm=None):
        super().__init__(args, comm)
        # every rank trains: no server, whatever --algo says
        self.server_based = self.is_server = False
        self.num_workers, self.worker_index = self.size, self.rank
        self.steps, self.dropped = 0, 0

    # set-up ----------------------------------------------------------------------------
    def setup(self):
        args, error, local = self.args, None, None
        try:
            if args.model not in MODELS:
                raise UsageError("--model-parallel trains the %s models, not %r"
                                 % (" and ".join(MODELS), args.model))
            self.backend = get_backend(args.backend, mpi.Node(self.comm).local_rank, args.gpu_ids)
            local = read_local(args, self.rank, self.size, self.rank, self.size)
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        mpi.agree(self.comm, error)
        self.data = combine(args, self.comm, local, self.rank)
        error = None
        try:
            self._build()  # the Trainer's: the full model, optimizer, schedule, data arrays
            full = self.net
            requirements.check(self.size, hidden_widths(full.components), args.minibatch_size)
            self.net = HybridNetwork(full, self.comm.Dup(), sync_bn=args.sync_bn, seed=args.seed)
            # clipping needs the norm of the whole gradient: done here, not per slice
            self.clip = self.optimizer.clip
            self.optimizer = create_optimizer(args.optimizer,
                                              **dict(self.optimizer.options, clip=0.0))
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        mpi.agree(self.comm, error)
        shortest = np.array([len(self.y_train)], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [shortest, MPI.INT64_T], op=MPI.MIN)
        self.shortest = int(shortest[0])
        if self.shortest == 0:
            exc = UsageError("--model-parallel needs training examples on every rank; a shard "
                             "of %d examples over %d ranks is empty" % (self.data.total_train,
                                                                         self.size))
            exc.collective = True
            raise exc
        self.per_rank = args.minibatch_size // self.size
        self._setup_run()

    def _announce(self):
        d, a, net = self.data, self.args, self.net
        kaldi_log("hybrid data/model parallel on %d ranks (--algo ignored), %s: each rank "
                  "takes %d of the %d samples of a step; %d params before the first fully "
                  "connected layer data-parallel, fully connected layers sliced by output "
                  "units (output layer %s); %d params, %d on this rank; %s data %d train / "
                  "%d held-out examples, backend %s" % (
                      self.size, a.model, self.per_rank, a.minibatch_size, net.dp_size,
                      "sliced" if net.sliced_logits else "replicated: %d classes do not split "
                      "over %d ranks" % (net.num_classes, self.size),
                      net.num_params_full, net.num_params, d.name, d.total_train, d.total_eval,
                      self.backend.name), "setup")

    # training ----------------------------------------------------------------------------
    def begin_epoch(self, epoch):
        """No synchronization algorithm to open a round of."""

    def train_epoch(self, epoch, progress):
        net, opt, b = self.net, self.optimizer, self.per_rank
        w, g = net.param_buffer.data, net.grad_buffer.data
        net.reseed_dropout(epoch)
        batches = Minibatches(self.x_train, self.y_train, b,
                              seed=self.args.seed * 100003 + self.rank, epoch=epoch)
        steps = math.ceil(self.shortest / b)
        loss_sum, frames_seen = 0.0, 0
        for t in range(steps):
            xb, yb = next(batches)
            rows = min(b, self.shortest - t * b)  # the same on every rank
            xb, yb = xb[:rows], yb[:rows]
            self.watchdog.enter(epoch, self.steps)
            loss = float(net.loss_and_grad(xb, yb))  # the global minibatch's: same everywhere
            self.watchdog.leave()
            self.steps += 1
            if not math.isfinite(loss) and not self._skip(epoch, loss):
                continue
            if self.clip:
                norm = net.global_grad_norm()
                if norm > self.clip:
                    g *= g.dtype.type(self.clip / norm)
            opt.step(w, g)
            # this rank's share: summed over ranks it is loss * B
            loss_sum += loss * rows
            frames_seen += rows
            progress.update(epoch, self.args.epochs, t + 1, steps,
                            loss_sum / max(frames_seen, 1))
        return loss_sum, frames_seen

    def _skip(self, epoch, loss):
        """A non-finite loss is the same on every rank: all stop, or all skip
        the step (--skip-nonfinite). Returns False when the step is skipped."""
        where = "non-finite loss %s at step %d (epoch %d)" % (loss, self.steps, epoch + 1)
        if not self.args.skip_nonfinite:
            exc = NonFiniteError(where + "; stopping (--skip-nonfinite skips such steps instead)")
            exc.collective = True
            raise exc
        if self.say:
            warnings.warn(where + ": step skipped")
        self.dropped += 1
        self.optimizer.reset()
        return False

    def _syncs(self):
        return self.steps

    def evaluate(self):
        self.net.average_stats()
        return self.net.evaluate(self.x_eval, self.y_eval)

    # outputs -----------------------------------------------------------------------------
    def header(self):
        config = {k: v for k, v in vars(self.args).items()
                  if isinstance(v, (int, float, str, bool)) or v is None}
        return {"model": self.model_header, "config": config,
                "hybrid": {"ranks": self.size, "sliced_logits": self.net.sliced_logits,
                           "sync_bn": self.net.sync_bn}}

    def finish(self):
        if self.dropped and self.say:
            kaldi_log("skipped %d step(s) with a non-finite loss (--skip-nonfinite)"
                      % self.dropped)
        if self.args.out:
            state = self.net.full_state_dict(root=0)
            if self.main:
                model_io.save(self.args.out, state, self.header())
                if self.say:
                    kaldi_log("wrote %s" % self.args.out, "finish")
        if self.say and self.net.traffic.steps:
            kaldi_log(traffic.describe(self.net.traffic_report()), "finish")
        if self.args.plot and self.main and self.metrics.rows:
            from .plot import plot_curves
            plot_curves(self.metrics.rows, self.args.plot,
                        "psgd hybrid data/model parallel, %d ranks" % self.size)

    def save_checkpoint(self, epoch, wall):
        state = self.net.full_state_dict(root=0)
        arrays = ckpt.join("net", state) if state is not None else {}
        arrays.update(ckpt.join("opt", _host_state(self.optimizer.state_dict())))
        if self.best is not None:
            arrays["best"] = self.backend.to_host(self.best)
        header = dict(self.header(), samples=self.samples, wall=wall, steps=self.steps,
                      schedule=self.schedule.state())
        self.checkpointer.save(epoch, arrays, header)

    def _check_hybrid(self, state):
        if "hybrid" not in state[1]:
            raise UsageError("%s holds a checkpoint of a run without --model-parallel"
                             % self.args.checkpoint_dir)

    def _resume(self):
        state = self._load_checkpoint(self._check_hybrid)
        if state is None:
            return
        arrays, header = state
        self.net.load_full_state(ckpt.split(arrays, "net") if self.main else None)
        self.optimizer.load_state_dict(_from_host(ckpt.split(arrays, "opt")))
        if "best" in arrays:
            self.best = self.backend.xp.asarray(arrays["best"])
        self.schedule.load(header["schedule"])
        self.start_epoch, self.samples = header["epoch"] + 1, header["samples"]
        self.steps, self.wall_offset = header["steps"], header["wall"]
        if self.say:
            kaldi_log("resumed from epoch %d of %s" % (header["epoch"] + 1,
                                                      self.args.checkpoint_dir))
