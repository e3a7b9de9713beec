"""--resume on another number of ranks or --servers (issue 30). The model
every rank starts from is the checkpoint's global model: w_g, the same in
every collective rank's file (rank 0's is read), or the server's center,
put together from the shard files of the checkpoint's S servers and cut
again for this job's. State an algorithm declares global (GLOBAL_STATE:
bmuf's D, sod's outer optimizer, masgd's shared velocity) carries over;
a worker's own state (WORKER_STATE) has no owner at another N and restarts
as reset_to makes it: reference points at the model, velocities and
residuals at zero. The local optimizer's moments restart too, except
under syncgrad, where every rank steps with the same averaged gradient
and so holds the same moments. Defaults that depend on N are those of
this N; the log says which changed."""
import numpy as np

from ..buffers import shard_bounds
from ..errors import UsageError
from . import checkpoint as ckpt
from .defaults import lr_scale
from .metrics import short
from .roles import server_count


class Layout:
    """The checkpoint's ranks, servers and workers beside this job's (its
    Config), and the flags of each (`then`, `now`) for the defaults by N."""

    def __init__(self, algorithm, header, config):
        saved = header.get("config", {})
        self.now = config.namespace()
        self.then = config.namespace(**saved)
        self.old_size, self.size = header["size"], config.run.size
        self.old_servers = server_count(algorithm, saved.get("servers"))
        self.servers = config.run.servers
        self.old_workers = algorithm.workers(self.old_size, max(self.old_servers, 1))
        self.workers = config.run.num_workers

    @property
    def changed(self):
        return (self.old_size, self.old_servers) != (self.size, self.servers)

    def describe(self):
        def one(ranks, servers, workers):
            return "%d ranks (%d workers%s)" % (ranks, workers, ", %d server%s" % (
                servers, "s" if servers > 1 else "") if servers else "")
        return "%s, the checkpoint's %s" % (one(self.size, self.servers, self.workers),
                                            one(self.old_size, self.old_servers,
                                                self.old_workers))


class Saved:
    """The checkpoint's files this rank reads at the new layout, each read
    once: `arrays` is rank 0's, which every rank was handed."""

    def __init__(self, checkpointer, folder, arrays, layout):
        self.checkpointer, self.folder, self.layout = checkpointer, folder, layout
        self.files = {0: arrays}

    def algo(self, rank):
        if rank not in self.files:
            self.files[rank] = self.checkpointer.load_from(self.folder, rank,
                                                           self.layout.old_size)[0]
        return ckpt.split(self.files[rank], "algo")

    def whole(self, key, size):
        """The servers' shards of state `key`, end to end (the last axis)."""
        parts = []
        for server in range(self.layout.old_servers):
            shard = self.algo(server).get(key)
            if shard is None:
                raise UsageError("checkpoint %s: server rank %d's file lacks its shard of %r" % (
                    self.folder, server, key))
            parts.append(shard)
        whole = np.concatenate(parts, axis=-1)
        if whole.shape[-1] != size:
            raise UsageError("checkpoint %s: the shards of %r in its %d server files cover %d "
                             "elements, the model has %d" % (
                                 self.folder, key, self.layout.old_servers, whole.shape[-1],
                                 size))
        return whole


def global_model(saved, param_names, size, rank):
    """The checkpoint's global model, flat, on rank 0 (None elsewhere):
    rank 0's net parameters, or the servers' center shards end to end."""
    if rank != 0:
        return None
    if saved.layout.old_servers:
        return saved.whole("center", size)
    net = ckpt.split(saved.files[0], "net")
    return np.concatenate([np.ravel(net[n]) for n in param_names])


def global_state(saved, sync, rank):
    """This rank's global algorithm state at the new layout: the declared
    global keys from a rank of the checkpoint that played the same role,
    sharded ones put together from the checkpoint's servers and cut for
    this rank's shard."""
    layout, size = saved.layout, sync.buffer.size
    keys = [k for k in sync.state_dict() if sync.is_global_state(k)]
    state = {}
    for key in keys:
        if key in sync.SHARDED_STATE:
            if key in sync.OPTIONAL_STATE and key not in saved.algo(0):
                continue        # none kept then: load_state_dict starts it afresh
            lo, hi = shard_bounds(size, layout.servers)[rank]
            state[key] = saved.whole(key, size)[..., lo:hi]
        else:
            # a worker's role began at rank old_servers; a server's and a collective rank's at 0
            source = layout.old_servers if sync.role == "worker" else 0
            if key in saved.algo(source):       # else load_state_dict names it
                state[key] = saved.algo(source)[key]
    return state


def optimizer_state(optimizer, saved, averaged):
    """The local optimizer's state to load: the checkpoint's options (a flag
    given anew is already in them), and the moments only where every rank
    held the same (`averaged`: syncgrad)."""
    state = dict(saved)
    if not averaged:
        state.update({slot: None for slot in optimizer.slots}, t=0)
    return state


def rescaled_lr(lr, layout):
    """The schedule's rate at this N: the large-batch rule of this N in
    place of the checkpoint's. The base rate is the same at every N (a --lr
    given then, or the default of the optimizer, which a resume cannot
    change); one given anew was set as it is (consistency.py)."""
    now, then = layout.now, layout.then
    if now.lr is not None and now.lr != then.lr:
        return lr
    return lr * lr_scale(now, layout.workers) / lr_scale(then, layout.old_workers)


def log_lines(layout, sync, algorithm, averaged, changes):
    """Rank 0's lines: one per rule of the resumed state, then what the
    defaults of this N changed (`changes`: [(name, old, new)])."""
    mine = list(sync.state_dict())
    carried = [k for k in mine if sync.is_global_state(k)]
    rebuilt = [k for k in mine if not sync.is_global_state(k)]
    if algorithm.server_based:
        rebuilt += [k for k in algorithm.WORKER_STATE if k not in rebuilt]
    source = ("the center, put together from the shards of its %d server%s and cut for %d"
              % (layout.old_servers, "s" if layout.old_servers > 1 else "", layout.servers)
              if layout.old_servers else "w_g, the model every rank held")
    lines = ["resume on %s: every rank starts from the checkpoint's global model (%s)" % (
        layout.describe(), source)]
    if carried:
        lines.append("resume: global %s state carried over: %s" % (sync.name, ", ".join(carried)))
    if rebuilt:
        lines.append("resume: each worker's own %s state restarts as at a fresh start from that "
                     "model (reference points at the model, the rest at zero): %s" % (
                         sync.name, ", ".join(rebuilt)))
    lines.append("resume: the local optimizer's state %s" % (
        "carries over (syncgrad: every rank steps with the same gradient)" if averaged else
        "restarts (moments at zero, step count 0): it was each worker's own"))
    lines.append("resume: the data is sharded again for %d workers; defaults for %d workers: %s"
                 % (layout.workers, layout.workers, ", ".join(
                     "%s %s -> %s" % (name, short(old), short(new))
                     for name, old, new in changes) or "none changed"))
    return lines


def option_changes(old_options, new_options):
    return [(k, old_options[k], v) for k, v in sorted(new_options.items())
            if k in old_options and old_options[k] != v]
