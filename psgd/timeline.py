"""python -m psgd.timeline TRACE.json [--png OUT.png]: what a --timeline
trace says without a trace viewer: per rank, the time spent computing,
communicating and waiting for others (and a server's serving and idling),
the rank the others waited for most, and with --png a picture of every
rank's track over the run."""
import collections
import json
import os
import sys

from . import trace
from .atomic import atomic_write
from .command_line import OneLineParser
from .errors import UsageError
from .train import straggler
from .train.stall_report import Names

# What a track is made of, and how the picture colours it (the parts of a
# sync nest inside it and are left to the trace viewer).
KINDS = collections.OrderedDict([
    (trace.COMPUTE, "tab:green"), (trace.SYNC, "tab:orange"), (trace.WAITING, "gold"),
    (trace.SERVE, "tab:blue"), (trace.IDLE, "lightgrey"), (trace.ARRIVE, "tab:red"),
    (trace.SERVER_END, "tab:red"), (trace.EVALUATE, "tab:purple"),
    (trace.CHECKPOINT, "tab:brown")])


class Trace:
    """A --timeline file: each rank's spans (name, start, end, args) in
    seconds, its host, and the server ranks."""

    def __init__(self, path):
        try:
            with open(path) as f:
                events = json.load(f)["traceEvents"]
            self._read(events)
        except OSError as exc:
            raise UsageError("%s: cannot read it (%s)" % (path, exc.strerror or exc))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError("%s: not a trace psgd --timeline wrote (%s: %s)" % (
                path, type(exc).__name__, exc))
        if not self.size:
            raise UsageError("%s: the trace has no rank's events" % path)

    def _read(self, events):
        hosts, servers, spans = {}, set(), collections.defaultdict(list)
        host_names = {}
        for e in events:
            if e["ph"] == "M" and e["name"] == "process_name":
                host_names[e["pid"]] = e["args"]["name"].split("host ", 1)[-1]
            elif e["ph"] == "M" and e["name"] == "thread_name":
                hosts[e["tid"]] = e["pid"]
                if e["args"]["name"].endswith("(server)"):
                    servers.add(e["tid"])
            elif e["ph"] == "X":
                start = e["ts"] / 1e6
                spans[e["tid"]].append((e["name"], start, start + e["dur"] / 1e6,
                                        e.get("args")))
        self.size = max(list(hosts) + list(spans), default=-1) + 1
        self.hosts = [host_names.get(hosts.get(r), "?") for r in range(self.size)]
        self.servers = servers
        self.spans = [sorted(spans[r], key=lambda s: s[1]) for r in range(self.size)]
        starts = [s[1] for rs in self.spans for s in rs]
        ends = [s[2] for rs in self.spans for s in rs]
        self.begin, self.end = (min(starts), max(ends)) if starts else (0.0, 0.0)


def summary(t):
    """(rows, straggler line): per rank a dict of seconds and shares."""
    held, waited = straggler.attribute(t.spans, t.size)
    rows = []
    for r in range(t.size):
        total = collections.Counter()
        for name, start, end, _ in t.spans[r]:
            total[name] += end - start
        span = t.end - t.begin
        if r in t.servers:
            work, comm, wait = total[trace.SERVE], 0.0, total[trace.IDLE]
        else:
            work = total[trace.COMPUTE]
            wait = waited[r]
            comm = max(total[trace.SYNC] + total[trace.ARRIVE] - wait, 0.0)
        rows.append({"rank": r, "host": t.hosts[r], "role": "server" if r in t.servers
                     else "worker", "compute": work, "communication": comm, "waiting": wait,
                     "held_others": held[r], "wall": span})
    workers = t.size - len(t.servers)
    found = straggler.straggler(held, t.end - t.begin, workers)
    return rows, straggler.line(Names(t.hosts), found, "the trace")


def table(rows):
    head = "%-5s %-10s %-7s %9s %9s %9s %9s   %s" % (
        "rank", "host", "role", "compute", "comm", "waiting", "held", "share of the time "
        "(compute/comm/waiting; a server: serving/-/idle)")
    lines = [head]
    for row in rows:
        wall = row["wall"] or 1.0
        lines.append("%-5d %-10s %-7s %8.2fs %8.2fs %8.2fs %8.2fs   %3.0f%% / %3.0f%% / %3.0f%%" % (
            row["rank"], row["host"][:10], row["role"], row["compute"], row["communication"],
            row["waiting"], row["held_others"], 100 * row["compute"] / wall,
            100 * row["communication"] / wall, 100 * row["waiting"] / wall))
    return "\n".join(lines)


def epoch_window(t, epoch=None):
    """(begin, end, epoch) of epoch `epoch` (0-based; None: the last) on the
    trace's clock, from the epoch ends every rank recorded; None without any."""
    ends = {}
    for rank_spans in t.spans:
        for name, _, end, args in rank_spans:
            if name.startswith(trace.ARRIVE) and args and "epoch" in args:
                ends[args["epoch"]] = max(ends.get(args["epoch"], end), end)
    if not ends:
        return None
    if epoch is None:
        epoch = max(ends)
    if epoch not in ends:
        raise UsageError("--epoch %d: the trace has epochs %d to %d" % (
            epoch + 1, min(ends) + 1, max(ends) + 1))
    before = [e for k, e in ends.items() if k < epoch]
    return (max(before) if before else t.begin), ends[epoch], epoch


def tracks(ax, t, window=None):
    """Every rank's spans as bars (within `window`, (begin, end), when given)."""
    lo, hi = window or (t.begin, t.end)
    for r in range(t.size):
        for name, colour in KINDS.items():
            bars = [(max(s, lo) - t.begin, min(e, hi) - max(s, lo)) for n, s, e, _ in t.spans[r]
                    if n == name and e > lo and s < hi]
            if bars:
                ax.broken_barh(bars, (r - 0.4, 0.8), facecolors=colour, linewidth=0)
    ax.set_yticks(range(t.size))
    ax.set_yticklabels(["rank %d%s\n%s" % (r, " (server)" if r in t.servers else "",
                                           t.hosts[r]) for r in range(t.size)])
    ax.tick_params(axis="y", labelsize=8 if t.size <= 16 else 5)   # 16 tracks fill the height
    ax.invert_yaxis()
    ax.set_xlim(lo - t.begin, hi - t.begin)


def draw(t, rows, line, path, epoch=None):
    """Every rank's track over the run and over one epoch (the last, or
    `epoch`), and each rank's shares, to `path`."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--png %s: drawing needs matplotlib (pip install matplotlib)" % path)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    window = epoch_window(t, epoch)
    fig, (top, zoom, bottom) = plt.subplots(3, 1, figsize=(11, 3 + 1.3 * min(t.size, 16)),
                                            gridspec_kw={"height_ratios": [3, 3, 2]})
    tracks(top, t)
    top.set_xlabel("seconds")
    top.set_title(line, fontsize=9)
    if window is not None:
        tracks(zoom, t, window[:2])
        zoom.set_xlabel("seconds (epoch %d)" % (window[2] + 1))
    else:
        zoom.set_visible(False)
    top.legend(handles=[Patch(color=c, label=n) for n, c in KINDS.items()
                        if n != trace.SERVER_END], ncol=8, fontsize=8, loc="upper center",
               bbox_to_anchor=(0.5, -0.22), frameon=False)
    ranks = [row["rank"] for row in rows]
    left = [0.0] * len(rows)
    for key, colour in (("compute", "tab:green"), ("communication", "tab:orange"),
                        ("waiting", "tab:red")):
        values = [row[key] for row in rows]
        bottom.barh(ranks, values, left=left, color=colour, label=key)
        left = [a + b for a, b in zip(left, values)]
    bottom.set_yticks(ranks)
    bottom.invert_yaxis()
    bottom.set_xlabel("seconds per rank (a server: serving / idle)")
    bottom.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.32),
                  frameon=False)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=80), suffix=".png")
    plt.close(fig)


def png_problem(path, trace_path):
    """Why the picture cannot go to `path`, or None (checked before reading)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "--png %s is a directory; give a file name" % path
    if not path.lower().endswith(".png"):
        return "--png %s: the picture is a PNG; name it .png" % path
    if not os.path.isdir(folder):
        return "--png %s: no folder %s" % (path, folder)
    if os.path.abspath(path) == os.path.abspath(trace_path):
        return "--png %s is the trace itself" % path
    return None


def main(argv=None):
    p = OneLineParser(prog="python -m psgd.timeline", description=__doc__.split("\n\n")[0])
    p.add_argument("trace", metavar="TRACE.json", help="a trace psgd.worker --timeline wrote")
    p.add_argument("--png", default=None, metavar="OUT.png", help="draw the tracks here")
    p.add_argument("--epoch", type=int, default=None, metavar="N",
                   help="the epoch the picture zooms on (default: the last)")
    args = p.parse_args(argv)
    try:
        problem = args.png and png_problem(args.png, args.trace)
        if problem:
            raise UsageError(problem)
        if args.epoch is not None and args.epoch < 1:
            raise UsageError("--epoch %d: epochs count from 1" % args.epoch)
        t = Trace(args.trace)
        rows, line = summary(t)
        print(table(rows))
        print(line)
        if args.png:
            draw(t, rows, line, args.png, None if args.epoch is None else args.epoch - 1)
            print("drew %s" % args.png)
    except UsageError as exc:
        sys.stderr.write("psgd.timeline: %s\n" % exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
