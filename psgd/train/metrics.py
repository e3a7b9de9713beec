"""What a run reports: one JSON object per epoch (--metrics), Kaldi-style log
lines that Kaldi's scheduler scripts parse (AvgLoss, FRAME_ACCURACY), and a
progress bar on rank 0 when stderr is a terminal."""
import json
import math
import os
import sys
import time
import warnings

import numpy as np
from mpi4py import MPI

from ..algorithms.server_stats import staleness_max, staleness_mean
from ..atomic import atomic_write
from ..errors import UsageError

PROGRAM = "psgd-train"


def short(value):
    """A value as the log lines write it: floats to 4 significant digits."""
    return "%.4g" % value if isinstance(value, float) else str(value)


def kaldi_log(message, where="train", depth=1):
    """A Kaldi LOG line: `LOG (prog[version]:where():file:line) message`, the
    file and line of the caller (`depth` frames up)."""
    from .. import __version__
    caller = sys._getframe(depth)
    print("LOG (%s[%s]:%s():%s:%d) %s" % (
        PROGRAM, __version__, where, os.path.basename(caller.f_code.co_filename),
        caller.f_lineno, message), flush=True)


def kaldi_epoch_lines(split, loss, accuracy, frames):
    """The two lines train_scheduler.sh greps: AvgLoss ($4) and FRAME_ACCURACY ($3)."""
    kaldi_log("AvgLoss: %.6g (Xent), [AvgXent: %.6g, AvgTargetEnt: 0] on %s, %d frames"
              % (loss, loss, split, frames), "main", depth=2)
    if accuracy is not None and not math.isnan(accuracy):
        print("FRAME_ACCURACY >> %.4f%% <<" % (100.0 * accuracy), flush=True)


class MetricsLog:
    """One JSON line per epoch (NaN written as null), the whole file rewritten
    atomically each epoch: a full disk leaves the last complete file, never
    a torn line. `keep_epochs`: the epochs a resumed run keeps (those up to
    its checkpoint; 0, a fresh start, truncates the file)."""

    def __init__(self, path=None, keep_epochs=0):
        self.path = path
        self.rows = []
        if path and keep_epochs and os.path.exists(path):
            self.rows = [r for r in read_rows(path) if r.get("epoch", 0) <= keep_epochs]
        if path:
            self._save()

    def write(self, row):
        row = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in row.items()}
        self.rows = [r for r in self.rows if r.get("epoch") != row.get("epoch")] + [row]
        if self.path:
            self._save()

    def _save(self):
        text = "".join(json.dumps(r) + "\n" for r in self.rows)
        atomic_write(self.path, lambda f: f.write(text), binary=False)


def read_rows(path):
    """The rows of a metrics file; a torn last line (a writer of an older
    psgd killed mid-line) is dropped with a warning, anything else that is
    not a JSON object is a UsageError naming the file and line."""
    with open(path) as f:
        lines = f.read().split("\n")
    rows = []
    numbered = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
    for k, (lineno, line) in enumerate(numbered):
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not an object")
        except ValueError:
            if k == len(numbered) - 1:
                warnings.warn("%s:%d: torn last line dropped" % (path, lineno))
                break
            raise UsageError("%s:%d: not a metrics line (a JSON object)" % (path, lineno)) \
                from None
        rows.append(row)
    return rows


class Progress:
    """A one-line progress bar on stderr (rank 0, terminals only unless forced)."""

    def __init__(self, mode="auto", enabled=True):
        tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.on = enabled and (mode == "on" or (mode == "auto" and tty))
        self.start = time.time()

    def update(self, epoch, epochs, done, total, loss):
        if not self.on:
            return
        width = 30
        filled = int(width * done / max(total, 1))
        sys.stderr.write("\repoch %d/%d [%s%s] %d/%d loss %.4f %.0fs " % (
            epoch + 1, epochs, "#" * filled, "." * (width - filled), done, total, loss,
            time.time() - self.start))
        sys.stderr.flush()

    def close(self):
        if self.on:
            sys.stderr.write("\n")
            sys.stderr.flush()


class ServerTotals:
    """The server's ServerStats summed over the epochs' run() calls."""

    def __init__(self):
        self.syncs = self.samples = 0
        self.busy_s = self.idle_s = self.wall_s = self.cpu_s = 0.0
        self.staleness = []          # [i]: syncs of staleness i, all epochs
        self.last = None             # the latest epoch's ServerStats
        self.base = (0, 0)           # syncs and samples of the servers before this one

    def carry_on(self):
        """A new server object goes on from these totals (a job that lost
        workers went on in a new trainer: psgd/train/survival.py)."""
        self.base = (self.syncs, self.samples)

    def add(self, stats):
        for key in ("busy_s", "idle_s", "wall_s", "cpu_s"):
            setattr(self, key, getattr(self, key) + getattr(stats, key))
        # the server's own running totals
        self.syncs, self.samples = self.base[0] + stats.syncs, self.base[1] + stats.samples
        self.staleness += [0] * (len(stats.staleness) - len(self.staleness))
        for tau, count in enumerate(stats.staleness):
            self.staleness[tau] += count
        self.last = stats

    def epoch_row(self):
        """The latest epoch's staleness for --metrics: mean, max, histogram."""
        s = self.last
        return {} if s is None else {"staleness_mean": s.staleness_mean,
                                     "staleness_max": s.staleness_max,
                                     "staleness_hist": list(s.staleness)}

    def summary(self):
        """[syncs, samples, busy, idle, wall, cpu, staleness mean, max] as float64."""
        return np.array([self.syncs, self.samples, self.busy_s, self.idle_s, self.wall_s,
                         self.cpu_s, staleness_mean(self.staleness),
                         staleness_max(self.staleness)], dtype=np.float64)

    def gather(self, comm, is_server, servers):
        """Collective: rank 0 gets every server's summary (one Gather of
        float64 rows, workers' rows empty) and returns one line per shard;
        the others return []."""
        rows = np.zeros((comm.Get_size(), len(_SUMMARY)), dtype=np.float64) \
            if comm.Get_rank() == 0 else None
        mine = self.summary() if is_server else np.zeros(len(_SUMMARY))
        comm.Gather([mine, MPI.DOUBLE], [rows, MPI.DOUBLE] if rows is not None else None, root=0)
        if rows is None:
            return []
        if servers == 1:
            return [_server_line("server", rows[0])]
        return [_server_line("server rank %d (shard %d of %d)" % (s, s + 1, servers), rows[s])
                for s in range(servers)]


_SUMMARY = ("syncs", "samples", "busy_s", "idle_s", "wall_s", "cpu_s", "mean", "max")


def _server_line(who, row):
    syncs, samples, busy, idle, wall, cpu, mean, most = row
    return ("%s: %d syncs served, %d samples; busy %.2fs, idle %.2fs of %.2fs, "
            "CPU %.0f%% of its wall time; staleness mean %.2f, max %d" % (
                who, syncs, samples, busy, idle, wall, 100 * cpu / max(wall, 1e-9), mean, most))
