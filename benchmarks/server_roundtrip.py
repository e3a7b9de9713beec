"""Server round trip: easgd and asgd against the bare MPI exchange.

On np 2 (rank 0 the server, rank 1 the one worker) the worker times each
`synchronize` and the same job times the bare exchange of the same bytes:
easgd against one Sendrecv (worker and server swap buffers), asgd against a
Send then a Recv. Blocks of bare and psgd exchanges alternate (a server sits
in run() for a whole block, so they cannot alternate call by call).

Two modes: `tight` (syncs back to back, so a sync also waits for the
server's update of the previous one) and `gap` (the worker sleeps between
syncs, as if computing, so the server's update is off the critical path but
its idle poll has to notice the next message), and `spin` (as gap, with the
server's option poll_max_sleep=0: it polls without sleeping, trading CPU for
latency; sizes up to 1e7). In `gap` mode the server's
own statistics (ServerStats from run()) give its CPU time per served sync
and the CPU share of its idle waits; the bare server waits in a blocking
MPI call, whose CPU share is measured the same way.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mpi_regimes  # noqa: E402
from server_roundtrip_report import ALGOS, WARMUP, report  # noqa: E402

MODES = ("tight", "gap", "spin")


def _bare(comm, algo, buf, scratch, reps, gap, update=None):
    """Per-rep worker times of the bare exchange; the server's CPU share and
    the worker's CPU time inside its exchanges. `update` (a WorkerUpdate):
    the worker also does a sync's elementwise work around its exchange, in
    the same loop, so that it meets the caches and the core as a sync does."""
    rank, times, worker_cpu = comm.rank, [], 0.0
    comm.Barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(reps):
        if rank == 0:
            if algo == "easgd":
                comm.Sendrecv(buf, dest=1, sendtag=1, recvbuf=scratch, source=1, recvtag=1)
            else:
                comm.Recv(scratch, source=1, tag=1)
                comm.Send(buf, dest=1, tag=1)
        elif rank == 1:
            if gap:
                time.sleep(gap)
            start, start_cpu = time.perf_counter(), time.process_time()
            if update:
                update.before()
            if algo == "easgd":
                comm.Sendrecv(buf, dest=0, sendtag=1, recvbuf=scratch, source=0, recvtag=1)
            else:
                comm.Send(buf, dest=0, tag=1)
                comm.Recv(scratch, source=0, tag=1)
            if update:
                update.after()
            times.append(time.perf_counter() - start)
            worker_cpu += time.process_time() - start_cpu
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    comm.Barrier()
    return times, {"wall_s": wall, "cpu_s": cpu, "worker_cpu_s": worker_cpu}


def _psgd(comm, algo, size, reps, gap, options, warmup):
    import psgd
    params = [np.full(size, 1.0 + comm.rank, dtype=np.float32)]
    obj = psgd.create(algo, params, comm=comm, **options)
    times, stats = [], {"worker_cpu_s": 0.0}
    if obj.role == "server":
        stats = obj.run().as_dict()
        stats.pop("per_worker", None)
    else:
        # Untimed first: both sides' waits learn the rhythm of the syncs from
        # their last waiting.HISTORY waits, as they do early in any training run.
        for i in range(warmup + reps):
            if gap:
                time.sleep(gap)
            start, start_cpu = time.perf_counter(), time.process_time()
            obj.synchronize(32)
            if i >= warmup:
                times.append(time.perf_counter() - start)
                stats["worker_cpu_s"] += time.process_time() - start_cpu
        obj.stop(0)
    obj.close()
    return times, stats


class WorkerUpdate:
    """A sync's elementwise work on the worker, as psgd does it, around a bare
    exchange of `sent` (easgd: the model; asgd: the delta) and `received`
    (the center): easgd's lerp after the exchange; asgd's delta before it
    and the copy of the pulled model after it."""

    def __init__(self, algo, sent, received):
        from psgd import kernels
        self.algo, self.sent, self.received = algo, sent, received
        self.model = sent.copy()    # asgd's w_k; `received` is its w_prev
        self.lerp = kernels.lerp

    def before(self):
        if self.algo == "asgd":
            np.subtract(self.model, self.received, out=self.sent)

    def after(self):
        if self.algo == "easgd":
            self.lerp(self.sent, self.received, 0.45)
        else:
            self.model[...] = self.received


def _update_alone(algo, buf, reps=5):
    """The worker's elementwise work of one sync (WorkerUpdate), timed alone
    and back to back (no MPI)."""
    update = WorkerUpdate(algo, buf.copy(), buf.copy())
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        update.before()
        update.after()
        times.append(time.perf_counter() - start)
    return common.median(times)


def child(argv):
    from mpi4py import MPI
    p = common.child_args()
    p.add_argument("--sizes", required=True)
    p.add_argument("--blocks", type=int, default=3)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rows = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        buf = np.full(size, 1.0, dtype=np.float32)
        scratch = np.empty_like(buf)
        nbytes = buf.nbytes
        reps = max(3, common.repeats_for(nbytes, args.quick) // args.blocks)
        warmup = WARMUP if size <= 10 ** 7 else 4
        _bare(comm, "easgd", buf, scratch, 2, 0)          # first-use set-up
        for algo in ALGOS:
            for mode in MODES if size <= 10 ** 7 else MODES[:2]:
                options = {"poll_max_sleep": 0.0} if mode == "spin" else {}
                bare_t, psgd_t, server, bare_server, with_update_t = [], [], [], [], []
                worker_cpu = [0.0, 0.0]     # the worker's CPU time in bare, psgd exchanges
                gap = 0.0
                if mode != "tight":
                    # Longer than the exchange and the server's update together.
                    gap = max(0.005, 4 * _probe(comm, buf, scratch))
                # the floor (gap mode): the bare exchange with the worker's
                # elementwise work, in the same loop (WorkerUpdate)
                kinds = ("bare", "bare+update", "psgd") if mode == "gap" else ("bare", "psgd")
                for block in range(args.blocks):
                    order = kinds if block % 2 == 0 else kinds[::-1]
                    for which in order:
                        if which == "bare+update":
                            update = WorkerUpdate(algo, buf, scratch)
                            with_update_t += _bare(comm, algo, buf, scratch, reps, gap, update)[0]
                        elif which == "bare":
                            t, s = _bare(comm, algo, buf, scratch, reps, gap)
                            bare_t += t
                            bare_server.append(s)
                            worker_cpu[0] += s.get("worker_cpu_s", 0.0)
                        else:
                            t, s = _psgd(comm, algo, size, reps, gap, options, warmup)
                            psgd_t += t
                            server.append(s)
                            worker_cpu[1] += s.get("worker_cpu_s", 0.0)
                alone = _update_alone(algo, buf) if comm.rank == 1 else 0.0
                rows.append(_row(comm, size, algo, mode, gap, bare_t, psgd_t, server,
                                 bare_server, alone, worker_cpu, with_update_t))
    if comm.rank == 0:
        import json
        with open(args.out, "w") as f:
            json.dump({"np": comm.size, "rows": [r for r in rows if r]}, f)


def _probe(comm, buf, scratch):
    """One bare Sendrecv's time, agreed by both ranks (the max)."""
    from mpi4py import MPI
    times, _ = _bare(comm, "easgd", buf, scratch, 3, 0)
    return comm.allreduce(common.median(times) if times else 0.0, op=MPI.MAX)


def _row(comm, size, algo, mode, gap, bare_t, psgd_t, server, bare_server, alone, worker_cpu,
         with_update_t):
    """Rank 1's times and rank 0's statistics, assembled on rank 0."""
    times = comm.gather((bare_t, psgd_t, alone, worker_cpu, with_update_t), root=0)
    if comm.rank != 0:
        return None
    bare_t, psgd_t, alone, worker_cpu, with_update_t = times[1]
    floor_alone = (common.median(bare_t) + alone) / common.median(bare_t)
    total = {k: sum(s.get(k, 0) for s in server) for k in (
        "syncs", "busy_s", "idle_s", "wall_s", "cpu_s", "sleeps", "idle_cpu_s")}
    bare_wall = sum(s["wall_s"] for s in bare_server)
    bare_cpu = sum(s["cpu_s"] for s in bare_server)
    return {"size": size, "algo": algo, "mode": mode, "gap_s": gap,
            "bare": bare_t, "psgd": psgd_t,
            "bare_median": common.median(bare_t), "psgd_median": common.median(psgd_t),
            "ratio": common.median(psgd_t) / common.median(bare_t),
            "update_alone": alone,
            "bare_with_update": with_update_t,
            # in situ where measured (gap mode), else the update timed alone
            "floor": common.median(with_update_t) / common.median(bare_t) if with_update_t
            else floor_alone,
            "floor_alone": floor_alone,
            "server": total,
            "server_cpu_per_sync": total["cpu_s"] / max(total["syncs"], 1),
            "server_busy_per_sync": total["busy_s"] / max(total["syncs"], 1),
            "server_cpu_share": total["cpu_s"] / total["wall_s"] if total["wall_s"] else None,
            "server_idle_share": total["idle_s"] / total["wall_s"] if total["wall_s"] else None,
            # what waiting costs the server: CPU time of its idle waits / their wall time
            "server_idle_cpu_share": total["idle_cpu_s"] / total["idle_s"]
            if total["idle_s"] else None,
            "bare_server_cpu_share": bare_cpu / bare_wall if bare_wall else None,
            # the worker's CPU time inside its syncs / their wall time (1.0: it spun)
            "worker_cpu_share": worker_cpu[1] / sum(psgd_t) if psgd_t else None,
            "bare_worker_cpu_share": worker_cpu[0] / sum(bare_t) if bare_t else None}


# driver ---------------------------------------------------------------------------
def run(quick=False, regime="both"):
    sizes = [10 ** 5, 10 ** 6, 10 ** 7] if quick else [10 ** 5, 10 ** 6, 10 ** 7, 10 ** 8]
    common.results_dir()
    sections = []
    for reg in mpi_regimes.regimes(regime):
        out = common.result_path("server_roundtrip_np2_%s.json" % reg)
        data = mpi_regimes.run_in_regime("server_roundtrip.py", 2, out, reg,
                                    ["--sizes", ",".join(map(str, sizes))] +
                                    (["--quick", "--blocks", "2"] if quick else []), timeout=1800)
        common.save_json(_saved(reg), data)
        sections.append((reg, _own_plot(reg, lambda: report(data, sizes))))
    return _by_regime(sections)


def _saved(regime):
    # shm keeps the name it had before the regimes, so old results still render
    return "server_roundtrip.json" if regime == "shm" else "server_roundtrip_%s.json" % regime


def rerender():
    sections = []
    for reg in mpi_regimes.REGIMES:
        if os.path.exists(common.result_path(_saved(reg))):
            data = common.load_json(_saved(reg))
            sizes = sorted({r["size"] for r in data["rows"]})
            sections.append((reg, _own_plot(reg, lambda: report(data, sizes))))
    return _by_regime(sections)


def _own_plot(regime, draw):
    """draw() (report(), which draws server_roundtrip.png), with a regime
    other than shm drawn under a name of its own and shm's plot kept."""
    png = common.result_path("server_roundtrip.png")
    if regime == "shm":
        return draw()
    kept = png + ".kept"
    if os.path.exists(png):
        os.replace(png, kept)
    section = draw()
    if os.path.exists(png):
        name = "server_roundtrip_%s.png" % regime
        os.replace(png, common.result_path(name))
        section.markdown = section.markdown.replace("server_roundtrip.png", name)
    if os.path.exists(kept):
        os.replace(kept, png)
    return section


def _by_regime(sections):
    """One regime: its section; several: each regime's table under its name
    (mpi_regimes.REGIMES), headlines tagged with the regime."""
    if len(sections) == 1 and sections[0][0] == "shm":
        return sections[0][1]
    first = sections[0][1]
    md = [first.markdown.split("\n\n", 1)[0], "", mpi_regimes.REGIME_NOTE, ""]
    for reg, section in sections:
        md += ["**Regime `%s`**" % reg, "", section.markdown.split("\n\n", 1)[1], ""]
    heads = ["%s (%s)" % (h, reg) for reg, section in sections for h in section.headlines]
    return common.Section(first.title, "\n".join(md), heads,
                          {reg: section.data for reg, section in sections})


if __name__ == "__main__":
    common.script_main(run, child, mpi_regimes.add_regime_arg)
