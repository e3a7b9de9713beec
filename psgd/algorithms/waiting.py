"""How the server algorithms wait for a message without burning a core: the
server's idle wait for a control message (server.py) and a worker's wait for
the server's answer (server_worker.py).

MPICH and Open MPI spin in every blocking call (Wait, Waitany, Recv), and
neither offers a wait that blocks in the kernel, so a wait here polls with
Test calls and sleeps in between. A sleep costs latency (a message that
arrives during one waits for it to end, plus ~70 us of timer slack), a spin
costs a core. The policy spends spinning where a message is likely: each
Waiter remembers how long its recent waits lasted. The server (an idle wait
for a control message) sleeps until just before the earliest of them ended
(a worker's usual gap between syncs) and spins in a short window there, then
backs off with doubling sleeps. When waits are short (a worker in a tight
loop) the window starts at once, so the wait is a spin; when they are long
the window is a few percent of the wait, so an idle server stays idle.

A worker spins from the start of its wait instead: over a network path
(MPICH's UCX over TCP) a transfer moves only while both sides poll, so a
worker asleep when the server begins to answer stalls it (1e7 float32: 1.2 s
instead of 51 ms, measured), whereas through shared memory the server's copy
completes without the worker. So a worker spins through its first wait, which
measures the answer time, and then for up to twice its usual quick answer
(SPIN_MIN at least), sleeping with a backoff past that: a server slower than
usual, busy with others or stuck, costs the worker a few wake-ups per
poll_max_sleep, and a server that is always slow teaches a longer spin.
"""
import collections
import math
import os
import time

FIRST_SLEEP = 50e-6     # the backoff's first sleep
LEAD = 150e-6           # spin from this long before the earliest expected arrival:
                        # a sleep here overshoots by ~100 us
SPIN_MIN = 200e-6       # and until at least this long after it
HISTORY = 16            # waits remembered
SPIN_SHARE = 0.03       # an anticipating wait spins at most this share of a typical
                        # wait beyond LEAD + SPIN_MIN: the idle server's CPU budget


class Waiter:
    """Repeats `test()` until it returns something other than None, which
    wait() returns. `max_sleep` is the longest sleep (the option
    poll_max_sleep); 0 polls without ever sleeping. `anticipate` (the
    server's wait for a control message, during which nothing is in flight):
    sleep until just before a message is expected; otherwise (a worker's wait
    for an answer) spin from the start. Clocks and sleep are parameters so
    that tests can drive the policy with a fake clock."""

    def __init__(self, max_sleep, anticipate=True, clock=time.perf_counter,
                 cpu_clock=time.process_time, sleep=time.sleep, yield_core=os.sched_yield):
        self.max_sleep, self.anticipate = max_sleep, anticipate
        self.clock, self.cpu_clock, self.sleep = clock, cpu_clock, sleep
        self.yield_core = yield_core
        self.recent = collections.deque(maxlen=HISTORY)   # how long each wait lasted

    def window(self):
        """(start, end) of the spin, in seconds from the start of a wait.
        Anticipating: from just before the earliest recent waits ended to the
        median, as far as SPIN_SHARE allows; before any wait, SPIN_MIN from
        the start (a message right away is likely). Otherwise: from the start
        to twice the earliest recent waits; before any wait, throughout."""
        if not self.recent:
            return (0.0, SPIN_MIN) if self.anticipate else (0.0, math.inf)
        ordered = sorted(self.recent)
        early = ordered[len(ordered) // 4]  # near the earliest, robust to outliers
        if not self.anticipate:
            return 0.0, 2 * early + SPIN_MIN
        typical = ordered[len(ordered) // 2]
        start = max(0.0, early - LEAD)
        longest = LEAD + SPIN_MIN + SPIN_SHARE * typical
        return start, min(typical + SPIN_MIN, start + longest)

    def wait(self, test, stats=None):
        """test()'s first result that is not None. `stats` (a ServerStats, or
        anything with `sleeps` and `idle_cpu_s`) counts the sleeps taken and
        the process CPU time the wait cost."""
        cpu = self.cpu_clock() if stats is not None else 0.0
        start = self.clock()
        spin_from, spin_to = self.window()
        delay, sleeps, last_miss = min(FIRST_SLEEP, self.max_sleep), 0, 0.0
        while True:
            result = test()
            now = self.clock() - start
            if result is not None:
                break
            last_miss = now
            if self.max_sleep <= 0 or spin_from <= now < spin_to:
                self.yield_core()                           # spin, letting a rank that
                continue                                    # shares the core (its peer) run
            if now < spin_from:                             # wake up in time for the window
                nap = min(self.max_sleep, spin_from - now)
            else:                                           # past it: back off
                nap = delay
                delay = min(2 * delay, self.max_sleep)
            self.sleep(nap)
            sleeps += 1
        # When it arrived is only known to lie after the last failed test: that
        # early bound keeps the window from drifting late.
        self.recent.append(last_miss)
        if stats is not None:
            stats.sleeps += sleeps
            stats.idle_cpu_s += self.cpu_clock() - cpu
        return result
