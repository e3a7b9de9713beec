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

HybridTrainer is a Trainer whose collaborator for how a step happens is
ModelParallel (data_parallel.DataParallel is the other one): the epoch loop,
the end-of-epoch metrics and log lines, the schedule, newbob's best model and
checkpoint files are the Trainer's. Checkpoints:
rank 0's file holds the gathered single-process model ("net/"), every rank's
its own optimizer state; --out is the gathered model, loadable by a
single-process run. The last log line compares the bytes moved per step with
what data-parallel gradient averaging of the same network would move.
"""

import math
import warnings

import numpy as np
from mpi4py import MPI

from .. import agreement, mpi
from ..data import Minibatches
from ..errors import CollectiveNonFiniteError, CollectiveUsageError, UsageError
from ..nnet import create_optimizer
from ..nnet.parallel import HybridNetwork, requirements, traffic
from ..nnet.parallel.network import hidden_widths
from . import checkpoint as ckpt
from . import whole_model
from .metrics import kaldi_log
from .trainer import Trainer

MODELS = ("cnn", "mlp")


class ModelParallel:
    """Every rank trains (no server, whatever --algo says); the network
    does all the communication itself."""

    server_based = is_server = False

    def __init__(self, config, comm):
        self.config, self.comm = config, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.num_workers, self.worker_index = self.size, self.rank
        self.say = self.rank == mpi.MAIN_RANK and not config.outputs.quiet
        self.steps, self.dropped = 0, 0
        # what build() makes
        self.net = self.net_comm = self.model_header = self.optimizer = self.clip = None
        self.train_set = self.held_out = self.shortest = self.per_rank = None

    # set-up ----------------------------------------------------------------------------
    def check(self):
        if self.config.model.model not in MODELS:
            raise UsageError("--model-parallel trains the %s models, not %r"
                             % (" and ".join(MODELS), self.config.model.model))

    def build(self, backend, data):
        """Collective: the whole model, sliced over the ranks, its optimizer
        and the data arrays."""
        whole = whole_model.build(self.comm, self.config, data, backend.xp)
        self.model_header, self.train_set, self.held_out = whole.header, whole.train, whole.held_out
        run, error = self.config.run, None
        try:
            requirements.check(self.size, hidden_widths(whole.net.components),
                               run.minibatch_size)
            self.net_comm = self.comm.Dup()
            self.net = HybridNetwork(whole.net, self.net_comm, sync_bn=self.config.model.sync_bn,
                                     seed=run.seed)
            # clipping needs the norm of the whole gradient: done here, not per slice
            self.clip = whole.optimizer.clip
            self.optimizer = create_optimizer(self.config.optimizer.optimizer,
                                              **dict(whole.optimizer.options, clip=0.0))
        except (UsageError, ValueError, OSError) as exc:
            error = exc if isinstance(exc, UsageError) else UsageError(str(exc))
        agreement.agree(self.comm, error)
        shortest = np.array([len(data.y_train)], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, [shortest, MPI.INT64_T], op=MPI.MIN)
        self.shortest = int(shortest[0])
        if self.shortest == 0:
            raise CollectiveUsageError(
                "--model-parallel needs training examples on every rank; a shard of %d "
                "examples over %d ranks is empty" % (data.total_train, self.size))
        self.per_rank = run.minibatch_size // self.size

    def announcement(self, data, backend):
        net = self.net
        return ("hybrid data/model parallel on %d ranks (--algo ignored), %s: each rank "
                "takes %d of the %d samples of a step; %d params before the first fully "
                "connected layer data-parallel, fully connected layers sliced by output "
                "units (output layer %s); %d params, %d on this rank; %s data %d train / "
                "%d held-out examples, backend %s" % (
                    self.size, whole_model.model_name(self.model_header, self.config),
                    self.per_rank, self.config.run.minibatch_size,
                    net.dp_size, "sliced" if net.sliced_logits else "replicated: %d classes "
                    "do not split over %d ranks" % (net.num_classes, self.size),
                    net.num_params_full, net.num_params, data.name, data.total_train,
                    data.total_eval, backend.name))

    def title(self):
        return "hybrid data/model parallel"

    def choices(self):
        """No algorithm, no block: nothing chosen for N but the rate."""
        return None

    # training ----------------------------------------------------------------------------
    def begin_epoch(self, epoch, first, lr, say=False):
        """The epoch's rate; no synchronization algorithm to open a round of."""
        self.optimizer.lr = lr

    def train_epoch(self, epoch, progress, watchdog):
        net, opt, b = self.net, self.optimizer, self.per_rank
        w, g = net.param_buffer.data, net.grad_buffer.data
        x, y = self.train_set
        shortest = self.shortest
        net.reseed_dropout(epoch)
        batches = Minibatches(x, y, b, seed=self.config.run.seed * 100003 + self.rank,
                              epoch=epoch)
        steps = math.ceil(shortest / b)
        loss_sum, frames_seen = 0.0, 0
        for t in range(steps):
            xb, yb = next(batches)
            rows = min(b, shortest - t * b)  # the same on every rank
            xb, yb = xb[:rows], yb[:rows]
            watchdog.enter(epoch, self.steps)
            loss = float(net.loss_and_grad(xb, yb))  # the global minibatch's: same everywhere
            watchdog.leave()
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
            progress.update(epoch, self.config.run.epochs, t + 1, steps,
                            loss_sum / max(frames_seen, 1))
        return loss_sum, frames_seen

    def _skip(self, epoch, loss):
        """A non-finite loss is the same on every rank: all stop, or all skip
        the step (--skip-nonfinite). Returns False when the step is skipped."""
        where = "non-finite loss %s at step %d (epoch %d)" % (loss, self.steps, epoch + 1)
        if not self.config.faults.skip_nonfinite:
            raise CollectiveNonFiniteError(
                where + "; stopping (--skip-nonfinite skips such steps instead)")
        if self.say:
            warnings.warn(where + ": step skipped")
        self.dropped += 1
        self.optimizer.reset()
        return False

    def syncs(self):
        return self.steps

    # end of epoch ------------------------------------------------------------------------
    def evaluate(self):
        self.net.average_stats()
        return self.net.evaluate(*self.held_out)

    def model(self):
        return self.net.param_buffer.data

    def rollback(self, best):
        """No algorithm holds state about the model: this rank's slice goes back."""
        self.net.param_buffer.data[...] = best

    # checkpoints and outputs -------------------------------------------------------------
    def header(self):
        return {"hybrid": {"ranks": self.size, "sliced_logits": self.net.sliced_logits,
                           "sync_bn": self.net.sync_bn}}

    def checkpoint_state(self):
        """Rank 0's file holds the gathered single-process model ("net/")."""
        state = self.net.full_state_dict(root=0)
        arrays = ckpt.join("net", state) if state is not None else {}
        arrays.update(ckpt.optimizer_arrays(self.optimizer))
        return arrays, {"steps": self.steps}

    def check_checkpoint(self, state):
        if "hybrid" not in state[1]:
            raise UsageError("%s holds a checkpoint of a run without --model-parallel"
                             % self.config.outputs.checkpoint_dir)
        ranks = state[1]["hybrid"].get("ranks")
        if ranks != self.size:
            raise UsageError("--resume: %s holds a --model-parallel checkpoint of %s ranks, "
                             "this job has %d: a model-parallel run resumes on as many ranks "
                             "as its slices" % (self.config.outputs.checkpoint_dir, ranks,
                                                self.size))

    def layout(self, header):
        """The slices fix the ranks (check_checkpoint): never another layout."""
        return None

    def load_checkpoint(self, arrays, header):
        main = self.rank == mpi.MAIN_RANK
        self.net.load_full_state(ckpt.split(arrays, "net") if main else None)
        self.optimizer.load_state_dict(ckpt.optimizer_state(arrays))
        self.steps = header["steps"]

    def final_state(self):
        """Collective: the gathered model on rank 0 (None elsewhere)."""
        return self.net.full_state_dict(root=0) if self.config.outputs.out else None

    def closing_lines(self, say, main):
        if self.dropped and say:
            kaldi_log("skipped %d step(s) with a non-finite loss (--skip-nonfinite)"
                      % self.dropped)

    def summary(self):
        """Bytes moved per step against data-parallel gradient averaging."""
        return traffic.describe(self.net.traffic_report()) if self.net.traffic.steps else None

    def close(self):
        """Collective: free the network's communicator."""
        if self.net is not None:
            self.net_comm.Free()
            self.net = None


class HybridTrainer(Trainer):
    """--model-parallel: the Trainer with ModelParallel steps."""

    parallelism = ModelParallel
