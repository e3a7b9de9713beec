"""What the stall watchdog says: from each rank's last status and when it
came, the ranks that hold the job up and what they were doing, by host when
the job spans hosts (a host whose every rank is silent is named as such)."""
import numpy as np

from .straggler import rendezvous

COMPUTING, SYNCING, DONE, SERVING, EPOCH_END = 0, 1, 2, 3, 4
WAITING = (SYNCING, SERVING, EPOCH_END)


class Names:
    """How ranks are named: "rank 2", or "rank 2 on h1" when the job spans
    hosts (`hosts`: each rank's host; None: one host)."""

    def __init__(self, hosts=None):
        self.hosts = hosts if hosts and len(set(hosts)) > 1 else None

    def rank(self, r):
        return "rank %d" % r if self.hosts is None else "rank %d on %s" % (r, self.hosts[r])

    def lost_hosts(self, silent):
        """{host: its ranks} of the hosts whose every rank is in `silent`."""
        if self.hosts is None:
            return {}
        everyone = {}
        for r, h in enumerate(self.hosts):
            everyone.setdefault(h, []).append(r)
        return {h: rs for h, rs in everyone.items() if set(rs) <= set(silent)}


def stall_report(table, seen_at, now, timeout, hosts=None, beat=0.0):
    """(line, key) naming the ranks that hold the job up, or None. `table`:
    each rank's last status (phase -1: none yet), `seen_at` when it came
    (for a rank never heard from: when the watchdog started), `hosts`: each
    rank's host, `beat`: the heartbeat period."""
    names = Names(hosts)
    size = len(table)
    phase = table[:, 0]
    age = now - seen_at
    elapsed = table[:, 3] / 1000.0 + age
    silent = [r for r in range(1, size) if phase[r] >= 0 and phase[r] != DONE
              and age[r] > timeout]
    # A rank never heard from in longer than the timeout since the watchdog
    # started (with it, collectively) is silent too, unless a rank heard from
    # is late: a host cut off before its first heartbeat crossed the link is
    # still a lost host, but on a loaded machine first heartbeats can take
    # seconds while the rank everyone waits for computes on.
    never = [r for r in range(1, size) if phase[r] < 0 and age[r] > timeout]
    # a rank whose heartbeats are overdue may be gone: what it last said it
    # was doing is stale, and silence names it
    overdue = [r for r in range(1, size) if beat and age[r] > 2 * beat and phase[r] >= 0]
    late = [r for r in range(size) if r not in overdue and phase[r] == COMPUTING
            and elapsed[r] > timeout]
    if never and (silent or not late):
        silent = sorted(silent + never)
    # A host cut off goes silent over one heartbeat period, its ranks one by
    # one: the report waits up to two periods for the rest of it.
    going = [r for r in range(1, size) if phase[r] != DONE
             and timeout - 2 * beat < age[r] <= timeout]
    if silent and going and names.hosts is not None and \
            max(age[silent]) <= timeout + 2 * beat and \
            {names.hosts[r] for r in going} & {names.hosts[r] for r in silent}:
        return None
    if silent:
        return _silent(names, table, age, elapsed, silent, timeout), ("silent",) + tuple(silent)
    waiting = [r for r in range(size) if phase[r] in WAITING]
    if not waiting:
        return None
    stuck = [r for r in waiting if phase[r] == SYNCING and elapsed[r] > timeout]
    serving = [r for r in range(size) if phase[r] == SERVING]   # ranks 0..S-1 under --servers S
    # a rank gone (its goodbye, or its process dead under
    # --survive-worker-loss) waits for nothing and holds nothing up
    live = [r for r in range(size) if phase[r] != DONE]
    if not late and stuck and all(phase[r] in WAITING for r in live):
        if serving:
            # Every worker waits and the servers have been asked: one of them is it.
            late = serving
            for r in serving:
                waiting.remove(r)
        elif all(elapsed[r] > timeout for r in live):
            line = "psgd: stall: every rank has waited for more than %gs (stuck in MPI?): %s" % (
                timeout, ", ".join(describe(names, r, table[r], elapsed[r]) for r in live))
            return line, ("all",) + tuple(int(table[r, 2]) for r in stuck)
    if not late:
        return None
    if late and late == serving:
        what = ["%s (%s server, epoch %d: no answer for %.1fs)" % (
            names.rank(r), "the" if late == [0] else "a", table[r, 1] + 1,
            max(elapsed[w] for w in stuck)) for r in late]
    else:
        what = [describe(names, r, table[r], elapsed[r]) for r in late]
    line = "psgd: stall: not arrived after %gs: %s; waiting: %s%s" % (
        timeout, ", ".join(what),
        ", ".join(describe(names, r, table[r], elapsed[r]) for r in waiting),
        _held(names, late, [r for r in waiting if phase[r] != SERVING], elapsed))
    return line, tuple((r, int(table[r, 0]), int(table[r, 1]), int(table[r, 2])) for r in late)


def _held(names, late, waiting, elapsed):
    """How long the waiting ranks have waited for the late ones so far, as
    the end-of-run straggler line counts it (straggler.rendezvous)."""
    arrivals = np.full(len(elapsed), np.nan)
    arrivals[waiting] = -elapsed[waiting]
    arrivals[late] = np.inf
    held, _ = rendezvous(arrivals, now=0.0)
    return "; the others have waited %s" % ", ".join(
        "%.1fs for %s" % (held[r], names.rank(r)) for r in late)


def _silent(names, table, age, elapsed, silent, timeout):
    others = [describe(names, r, table[r], elapsed[r]) for r in range(len(table))
              if r not in silent and table[r, 0] != DONE]
    heard = ", ".join("%s (never heard from in %.1fs)" % (names.rank(r), age[r])
                      if table[r, 0] < 0 else "%s (last heard %.1fs ago: %s)" % (
                          names.rank(r), age[r], doing(table[r], elapsed[r] - age[r]))
                      for r in silent)
    lost = names.lost_hosts(silent)
    if lost:
        # every rank of a host at once: the host, not a process. Heartbeats
        # share MPI's connections: while every rank waits in a collective,
        # a slow link queues its host's heartbeats behind the sync's bytes,
        # and a cut one stops them; either way that host's link holds the job.
        why = "its link is slow or cut" if all(table[r, 0] in WAITING for r in range(
            len(table)) if table[r, 0] != DONE) else "lost, cut off or frozen?"
        head = "; ".join("host %s (rank%s %s) silent for more than %gs: %s" % (
            h, "" if len(rs) == 1 else "s", ", ".join(map(str, rs)), timeout, why)
            for h, rs in lost.items())
        return "psgd: stall: %s; %s%s" % (head, heard, "; others: " + ", ".join(others)
                                          if others else "")
    return "psgd: stall: silent for more than %gs (no heartbeat: frozen or dead?): %s%s" % (
        timeout, heard, "; others: " + ", ".join(others) if others else "")


def slow_link(names, behind, threshold, noise, heard):
    """"slow link: host h1's (...)" when one host's ranks hear rank 0 more
    than `threshold` seconds `behind` (a round trip over that host's link)
    and the other hosts' within `noise` (one heartbeat period) of it; on two
    hosts, the link between them. Else "". Only hosts whose every rank is
    still `heard` from are slow (the others may be cut off: silence names
    them)."""
    if names.hosts is None:
        return ""
    home = names.hosts[0]
    lag, quiet = {}, set()
    for r, h in enumerate(names.hosts):
        if h != home:
            lag.setdefault(h, []).append(behind[r])
            if not heard[r]:
                quiet.add(h)
    lag = {h: sorted(v)[len(v) // 2] for h, v in lag.items()}
    slow = sorted(h for h, v in lag.items() if v > threshold and h not in quiet)
    if not slow:
        return ""
    if len(lag) == 1:
        return "slow link: between hosts %s and %s (%s hears rank 0 %.1fs behind)" % (
            home, slow[0], slow[0], lag[slow[0]])
    fine = [v for h, v in lag.items() if h not in slow]
    if not fine or max(fine) > noise:
        # every other host hears rank 0 late: its own link is the slow one
        return "slow link: host %s's (%s; every other host hears rank 0 %.1fs behind)" % (
            home, _ranks_of(names, home), min(lag.values()))
    return "slow link: %s (other hosts within %.1fs)" % (", ".join(
        "host %s's (%s; hears rank 0 %.1fs behind)" % (h, _ranks_of(names, h), lag[h])
        for h in slow), max(fine))


def _ranks_of(names, host):
    ranks = [r for r, h in enumerate(names.hosts) if h == host]
    return "rank%s %s" % ("" if len(ranks) == 1 else "s", ", ".join(map(str, ranks)))


def describe(names, r, status, elapsed):
    return "%s (%s)" % (names.rank(r), doing(status, elapsed))


def doing(status, elapsed):
    phase, epoch, sync_no = int(status[0]), int(status[1]) + 1, int(status[2])
    if phase < 0:
        return "never reported"
    if phase == COMPUTING:
        return "computing for %.1fs in epoch %d, after sync %d" % (elapsed, epoch, sync_no)
    if phase == SYNCING:
        return "in sync %d of epoch %d for %.1fs" % (sync_no + 1, epoch, elapsed)
    if phase == SERVING:
        return "the server, serving epoch %d" % epoch
    if phase == EPOCH_END:
        return "at the end of epoch %d for %.1fs" % (epoch, elapsed)
    return "finished"
