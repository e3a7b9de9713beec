"""What a run reports: one JSON object per epoch (--metrics), Kaldi-style log
lines that Kaldi's scheduler scripts parse (AvgLoss, FRAME_ACCURACY), and a
progress bar on rank 0 when stderr is a terminal."""
import json
import math
import os
import sys
import time

PROGRAM = "psgd-train"


def kaldi_log(message, where="train"):
    """A Kaldi LOG line: `LOG (prog[version]:where():file:line) message`."""
    from .. import __version__
    print("LOG (%s[%s]:%s():trainer.py:0) %s" % (PROGRAM, __version__, where, message), flush=True)


def kaldi_epoch_lines(split, loss, accuracy, frames):
    """The two lines train_scheduler.sh greps: AvgLoss ($4) and FRAME_ACCURACY ($3)."""
    kaldi_log("AvgLoss: %.6g (Xent), [AvgXent: %.6g, AvgTargetEnt: 0] on %s, %d frames"
              % (loss, loss, split, frames), "main")
    if accuracy is not None and not math.isnan(accuracy):
        print("FRAME_ACCURACY >> %.4f%% <<" % (100.0 * accuracy), flush=True)


class MetricsLog:
    """Appends one JSON line per epoch (NaN written as null) and keeps them."""

    def __init__(self, path=None, resume=False):
        self.path = path
        self.rows = []
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            os.makedirs(folder, exist_ok=True)
            if resume and os.path.exists(path):
                with open(path) as f:
                    self.rows = [json.loads(line) for line in f if line.strip()]
            else:
                open(path, "w").close()

    def write(self, row):
        row = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in row.items()}
        self.rows = [r for r in self.rows if r.get("epoch") != row.get("epoch")] + [row]
        if self.path:
            with open(self.path, "w") as f:
                for r in self.rows:
                    f.write(json.dumps(r) + "\n")
                f.flush()
                os.fsync(f.fileno())


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

    def add(self, stats):
        for key in ("busy_s", "idle_s", "wall_s", "cpu_s"):
            setattr(self, key, getattr(self, key) + getattr(stats, key))
        self.syncs, self.samples = stats.syncs, stats.samples  # running totals already

    def line(self):
        return ("server: %d syncs served, %d samples; busy %.2fs, idle %.2fs of %.2fs, "
                "CPU %.0f%% of its wall time" % (self.syncs, self.samples, self.busy_s,
                                                 self.idle_s, self.wall_s,
                                                 100 * self.cpu_s / max(self.wall_s, 1e-9)))
