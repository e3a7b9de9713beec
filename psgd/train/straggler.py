"""Who held the others back, from what each rank recorded (psgd/trace.py),
on one clock: the end-of-run line, --metrics' per-epoch columns, the
timeline summary and the stall watchdog all name the straggler with this.

Where all meet (a collective sync, an epoch's end) every rank waits from
its own arrival until the last one's: that wait is the last arriver's doing.
A worker of a server algorithm waits in its sync while a server serves
others: the time it serves another worker is that worker's doing (a worker
whose transfers crawl over a slow link holds the server, and so everyone)."""
import bisect

import numpy as np

from .. import trace

# Arrivals this close together (seconds) are a tie: the wait is shared.
TIE_S = 1e-6


def rendezvous(arrivals, now=None):
    """(held, waited) for one meeting: `arrivals[r]` when rank r arrived (nan:
    not part of it; inf: not arrived yet, which counts as `now`). held[r]:
    seconds the others waited for r; waited[r]: seconds r waited."""
    a = np.asarray(arrivals, dtype=float).copy()
    if now is not None:
        a[np.isinf(a)] = now
    held, waited = np.zeros(len(a)), np.zeros(len(a))
    there = ~np.isnan(a)
    if there.sum() < 2:
        return held, waited
    last = a[there].max()
    waited[there] = last - a[there]
    late = there & (a >= last - TIE_S)
    held[late] = waited.sum() / late.sum()
    return held, waited


def attribute(spans, size, waits=None):
    """(held, waited) over ranks 0..size-1 from `spans[r]`: rank r's spans
    (name, start, end, args) on a common clock. `waits`, a list: each wait
    found is appended to it as (rank, start, end, the rank it waited for)."""
    held, waited = np.zeros(size), np.zeros(size)
    meetings = {}
    serves = {}                  # server rank -> sorted [(start, end, worker)]
    for r, rank_spans in enumerate(spans):
        for name, start, end, args in rank_spans:
            if name == trace.SYNC and args["collective"]:
                meetings.setdefault(("sync", args["sync"]), {})[r] = start
            elif name == trace.ARRIVE:
                meetings.setdefault(("epoch", args["epoch"]), {})[r] = start
            elif name == trace.SERVE:
                serves.setdefault(r, []).append((start, end, args["worker"]))
    for arrivals in meetings.values():
        a = np.full(size, np.nan)
        for r, t in arrivals.items():
            a[r] = t
        h, w = rendezvous(a)
        held += h
        waited += w
        if waits is not None and h.any():
            last = int(np.argmax(h))
            waits.extend((r, t, t + w[r], last) for r, t in arrivals.items() if w[r] > 0)
    index = {}                   # server rank -> (its serves' starts, its longest serve)
    for server, served in serves.items():
        served.sort()
        index[server] = ([s for s, _, _ in served], max(e - s for s, e, _ in served))
    for r, rank_spans in enumerate(spans):
        for name, start, end, args in rank_spans:
            if name != trace.SYNC or args["collective"]:
                continue
            found = []
            for server, served in serves.items():
                starts, longest = index[server]
                i = bisect.bisect_left(starts, start - longest)
                while i < len(served) and served[i][0] < end:
                    s, e, worker = served[i]
                    if worker != r and min(e, end) > max(s, start):
                        found.append((worker, max(s, start), min(e, end)))
                    i += 1
            # Shards served at once (--servers S) overlap: the wait counts once.
            total = sum(e - s for _, s, e in found)
            scale = min(1.0, (end - start) / total) if total > 0 else 0.0
            for worker, s, e in found:
                held[worker] += scale * (e - s)
                waited[r] += scale * (e - s)
                if waits is not None:
                    waits.append((r, s, e, worker))
    return held, waited


def straggler(held, wall, ranks):
    """(rank, seconds, share, next) of the rank the others waited for most
    over `wall` seconds, `ranks` of them taking part (share: of the others'
    time; next: (rank, seconds) of the runner-up, None without one), or
    None when nobody waited."""
    if not len(held) or held.max() <= 0:
        return None
    order = np.argsort(-held, kind="stable")
    r = int(order[0])
    others = max(ranks - 1, 1) * wall
    runner = (int(order[1]), float(held[order[1]])) if len(held) > 1 and \
        held[order[1]] > 0 else None
    return r, float(held[r]), float(held[r]) / others if others > 0 else 0.0, runner


def line(names, found, what="the run"):
    """The one line naming the straggler (`found`: straggler()'s answer)."""
    if found is None:
        return "straggler: none over %s (no rank waited for another)" % what
    r, seconds, share, runner = found
    return "straggler: %s; the others waited %.2fs for it over %s, %.1f%% of their time%s" % (
        names.rank(r), seconds, what, 100 * share,
        "" if runner is None else " (next: %s, %.2fs)" % (names.rank(runner[0]), runner[1]))
