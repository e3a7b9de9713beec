"""Server throughput: syncs served per second, and the bytes through the
busiest server rank, against workers N and server shards S, in two regimes.

One job per (regime, N, S): ranks 0..S-1 serve (psgd.create(..., servers=S),
passed only when S > 1), ranks S..S+N-1 sync asgd back to back (push a delta,
pull the center: the model's bytes in each direction) for DURATION seconds
each, at every size. Syncs per second = the workers' syncs / the slowest
server's run() wall time. Every sync of every worker trades one shard with
every server, so a server rank moves 2 x (its shard's bytes) per sync served
(in and out). The model next to it: bytes per server per round (every worker
syncing once) = model size x N / S, each way.

Regimes: `shm` is MPI through shared memory (a memcpy); `network` forces
MPICH through its network path (UCX over loopback TCP). The job of N = 1,
S = 1 also times a bare Allreduce of ALLREDUCE_CHECK float32 at np 2, which
shows the regime took: it is several times slower over TCP.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mpi_regimes  # noqa: E402

WORKERS = (1, 2, 4, 8)
SHARDS = (1, 2, 4)
SIZES = (10 ** 6, 10 ** 7)
DURATION = 1.0              # seconds each worker syncs, per size
ALLREDUCE_CHECK = 10 ** 7
ALGO = "asgd"
REGIMES = mpi_regimes.REGIMES
regime_env = mpi_regimes.regime_env      # MPICH or Open MPI through its network path


# child: one job -------------------------------------------------------------------
def child(argv):
    from mpi4py import MPI
    p = common.child_args()
    p.add_argument("--sizes", required=True)
    p.add_argument("--servers", type=int, required=True)
    p.add_argument("--duration", type=float, default=DURATION)
    p.add_argument("--algo", default=ALGO, help="the server algorithm the workers sync")
    p.add_argument("--bare", action="store_true",
                   help="also time the same bytes as one bare MPI exchange, without and "
                        "with the workers' arithmetic (bare_exchange)")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    out = {"np": comm.size, "servers": args.servers, "workers": comm.size - args.servers,
           "algo": args.algo, "rows": []}
    if comm.size == 2:
        out["allreduce_check_s"] = _allreduce(comm, ALLREDUCE_CHECK)
    kinds = (("bare", False), ("bare_arithmetic", True)) if args.bare else ()
    for size in (int(float(s)) for s in args.sizes.split(",")):
        bare = {kind: bare_exchange(comm, size, args.servers, arithmetic=a) for kind, a in kinds}
        row = _measure(comm, size, args.servers, args.duration, args.algo)
        for kind, a in kinds:       # rounds before and after the syncs, each timed alone
            bare[kind] += bare_exchange(comm, size, args.servers, arithmetic=a)
            if comm.rank == 0:
                row[kind + "_round_s"] = bare[kind]
                row[kind + "_bytes_per_s"] = 2 * (comm.size - args.servers) * size * 4 / \
                    common.median(bare[kind])
        if comm.rank == 0:
            out["rows"].append(row)
    if comm.rank == 0:
        import json
        with open(args.out, "w") as f:
            json.dump(out, f)


def bare_exchange(comm, size, servers, reps=4, arithmetic=False):
    """Seconds of each of `reps` rounds (the slowest rank's) of a bare
    exchange of the same bytes: every worker sends each server its shard of a
    float32 model and receives it back, every message posted at once in
    psgd's server pieces (by the path of the bytes), no update, no control
    message, one Waitall. What MPI moves in this shape on this machine: the
    limit of any server protocol over it. `arithmetic`: each worker also does
    asgd's, each piece's delta formed (w - w_prev) just before it is posted
    and the model copied from the w_prev received once all is in, so that
    what the workers' memory passes cost beside MPI on this machine's shared
    cores is measured apart from psgd. Collective."""
    from mpi4py import MPI
    from psgd import mpi as psgd_mpi, pieces
    from psgd.buffers import shard_bounds
    piece = pieces.server_piece(psgd_mpi.spans_hosts(comm)) or size
    workers = range(servers, comm.size)
    bounds = shard_bounds(size, servers)
    rank = comm.rank
    mine = bounds[rank] if rank < servers else (0, size)
    out = np.ones(mine[1] - mine[0], dtype=np.float32)
    back = [np.empty_like(out) for _ in workers] if rank < servers else [np.zeros_like(out)]
    delta = np.empty_like(out) if arithmetic and rank >= servers else out

    def cut(lo, hi):
        return [(a, min(a + piece, hi)) for a in range(lo, hi, piece)]

    def round_trip():
        requests = []
        if rank < servers:
            for k, worker in enumerate(workers):
                for a, b in cut(0, len(out)):
                    requests.append(comm.Irecv(back[k][a:b], source=worker, tag=1))
                    requests.append(comm.Isend(out[a:b], dest=worker, tag=2))
        else:
            for server, (lo, hi) in enumerate(bounds):
                for a, b in cut(lo, hi):
                    if arithmetic:
                        np.subtract(out[a:b], back[0][a:b], out=delta[a:b])
                    requests.append(comm.Isend(delta[a:b], dest=server, tag=1))
                    requests.append(comm.Irecv(back[0][a:b], source=server, tag=2))
        MPI.Request.Waitall(requests)
        if arithmetic and rank >= servers:
            out[...] = back[0]
    round_trip()                        # connections up
    return [common.timed_collective(comm, round_trip) for _ in range(reps)]


def _allreduce(comm, size, reps=5):
    from mpi4py import MPI
    buf = np.ones(size, dtype=np.float32)
    times = [common.timed_collective(comm, lambda: comm.Allreduce(MPI.IN_PLACE, buf))
             for _ in range(reps + 1)]
    return common.median(times[1:])


def _measure(comm, size, servers, duration, algo=ALGO):
    import psgd
    options = {"servers": servers} if servers > 1 else {}
    if algo == "easgd":     # in line: with no compute between syncs nothing is hidden
        options["overlap"] = "never"
    obj = psgd.create(algo, [np.zeros(size, dtype=np.float32)], comm=comm, **options)
    comm.Barrier()
    mine = {"server": obj.role == "server"}
    if obj.role == "server":
        stats = obj.run()
        lo, hi = getattr(obj, "shard", (0, size))
        mine.update(syncs=stats.syncs, wall_s=stats.wall_s, busy_s=stats.busy_s,
                    cpu_s=stats.cpu_s, idle_cpu_s=getattr(stats, "idle_cpu_s", None),
                    shard_bytes=(hi - lo) * 4)
    else:
        began = time.perf_counter()
        done, end = [], began + duration        # each sync's end, from this rank's start
        while time.perf_counter() < end:
            obj.synchronize(1)
            done.append(time.perf_counter() - began)
        obj.stop(0)
        mine.update(syncs=len(done), done=done)
    obj.close()
    ranks = comm.gather(mine, root=0)
    if comm.rank != 0:
        return None
    served = [r for r in ranks if r["server"]]
    syncs = sum(r["syncs"] for r in ranks if not r["server"])
    wall = max(r["wall_s"] for r in served)
    busiest = max(served, key=lambda r: r["syncs"] * r["shard_bytes"])
    steady = steady_syncs_per_s([r["done"] for r in ranks if not r["server"]])
    return {"size": size, "syncs": syncs, "wall_s": wall, "syncs_per_s": syncs / wall,
            "busiest_bytes_per_s": 2 * busiest["syncs"] * busiest["shard_bytes"] / wall,
            "servers_bytes_per_s": sum(2 * r["syncs"] * r["shard_bytes"] for r in served) / wall,
            # every sync moves the model's bytes each way, over all the shards
            "steady_bytes_per_s": steady and 2 * steady * size * 4,
            "busiest_busy_share": busiest["busy_s"] / busiest["wall_s"],
            "server_cpu_share": max(r["cpu_s"] / r["wall_s"] for r in served)}


def steady_syncs_per_s(done):
    """Syncs per second while every worker syncs: `done` holds each worker's
    sync end times (seconds from the common start after a barrier); the span
    runs from the latest first end to the earliest last end, so the run's
    start-up (connections, first touches of the buffers) and wind-down (the
    first worker stopped, the others still syncing) are left out. Each
    worker's rate is its own syncs between its first and last end inside the
    span: counting the syncs that end in the span read workers in step
    2-4% low, since the span ends at one worker's last end while the
    others' last syncs end just after it, their time in the span with no
    sync counted (FINDINGS). A worker with fewer than two ends in the span
    counts those it has over the span. None where the span is empty."""
    if not all(done):
        return None
    start, end = max(d[0] for d in done), min(d[-1] for d in done)
    if end <= start:
        return None
    rate = 0.0
    for ends in done:
        inside = [t for t in ends if start <= t <= end]
        if len(inside) >= 2:
            rate += (len(inside) - 1) / (inside[-1] - inside[0])
        else:
            rate += len(inside) / (end - start)
    return rate


# driver ---------------------------------------------------------------------------
def run(quick=False, regime="both"):
    chosen = mpi_regimes.regimes(regime)
    workers, shards = ((1, 2), (1, 2)) if quick else (WORKERS, SHARDS)
    sizes = (10 ** 5, 10 ** 6) if quick else SIZES
    duration = 0.3 if quick else DURATION
    results, errors, checks = [], {}, {}
    for reg in chosen:
        for s in shards:
            for n in workers:
                out = common.result_path("server_throughput_child.json")
                try:
                    data = common.run_child(
                        "server_throughput.py", s + n, out,
                        ["--sizes", ",".join(map(str, sizes)), "--servers", s,
                         "--duration", duration], timeout=300, env=regime_env(reg))
                except Exception as exc:    # record it and go on (S > 1 needs --servers)
                    errors["%s, N=%d, S=%d" % (reg, n, s)] = common.error_line(exc)
                    continue
                if "allreduce_check_s" in data:
                    checks[reg] = data["allreduce_check_s"]
                for row in data["rows"]:
                    results.append(dict(row, regime=reg, workers=n, servers=s))
    data = {"results": results, "errors": errors, "allreduce_check_s": checks,
            "regime_env": {reg: regime_env(reg) for reg in chosen}, "cores": os.cpu_count()}
    common.save_json("server_throughput.json", data)
    return report(data)


def rerender():
    return report(common.load_json("server_throughput.json"))


def report(data):
    results, errors = data["results"], data.get("errors", {})
    by = {(r["regime"], r["size"], r["workers"], r["servers"]): r for r in results}
    regimes = [reg for reg in REGIMES if any(k[0] == reg for k in by)]
    sizes = sorted({k[1] for k in by})
    workers = sorted({k[2] for k in by})
    shards = sorted({k[3] for k in by})
    md = ["%s (delta push, model pull) with N workers syncing back to back against S "
          "server ranks (ranks 0..S-1). `syncs/s`: every worker's syncs / the slowest "
          "server's run() wall time; `busiest server`: bytes in and out of the server rank "
          "that moved most, per second (2 x its shard x syncs served); `busy`: its share of "
          "wall time serving. `model MB/round` is the model of how it scales: bytes per "
          "server per round (each worker syncing once) = model size x N / S, each way; a "
          "server's link carrying B bytes/s each way serves at most B x S / model size "
          "syncs/s in all." % ALGO, "",
          _cores_note(data.get("cores") or os.cpu_count(), workers, shards), ""]
    checks = data.get("allreduce_check_s", {})
    if checks:
        md += ["Regime check, a bare Allreduce of %s float32 at np 2: %s." % (
            common.fmt_size(ALLREDUCE_CHECK), ", ".join(
                "`%s` %s" % (reg, common.fmt_time(checks[reg])) for reg in regimes
                if reg in checks)), ""]
    for reg in regimes:
        env = data.get("regime_env", {}).get(reg) or {}
        md += ["**Regime `%s`**%s" % (reg, " (`%s`)" % " ".join(
            "%s=%s" % kv for kv in sorted(env.items())) if env else ""), ""]
        rows = []
        for size in sizes:
            for s in shards:
                for n in workers:
                    r = by.get((reg, size, n, s))
                    model = 4 * size * n / s
                    if r is None:
                        rows.append([common.fmt_size(size), s, n, "-", "-", "-", "-",
                                     "%.1f" % (model / 1e6)])
                        continue
                    rows.append([common.fmt_size(size), s, n, "%.1f" % r["syncs_per_s"],
                                 "%.0f MB/s" % (r["busiest_bytes_per_s"] / 1e6),
                                 "%.0f%%" % (100 * r["busiest_busy_share"]),
                                 "%.0f%%" % (100 * r["server_cpu_share"]),
                                 "%.1f" % (model / 1e6)])
        md += [common.table(["parameters", "S", "N", "syncs/s", "busiest server",
                             "busy", "server CPU", "model MB/round"], rows), ""]
    if errors:
        md += ["Not measured:", ""] + ["- %s: `%s`" % kv for kv in sorted(errors.items())] + [""]
    heads = []
    for reg in regimes:
        best = max((r for r in results if r["regime"] == reg),
                   key=lambda r: r["busiest_bytes_per_s"], default=None)
        if best:
            heads.append("server throughput (%s): at most %.0f MB/s through one server rank "
                         "(%s parameters, N=%d, S=%d, %.1f syncs/s)" % (
                             reg, best["busiest_bytes_per_s"] / 1e6, common.fmt_size(best["size"]),
                             best["workers"], best["servers"], best["syncs_per_s"]))
    if errors:
        heads.append("server throughput: %d configurations not measured" % len(errors))
    return common.Section("Server throughput", "\n".join(md), heads, data)


def _cores_note(cores, workers, shards):
    most = max(workers) + max(shards)
    return ("On %d cores, %d ranks (N=%d, S=%d) take turns: once N + S passes the cores, "
            "adding workers or shards adds no CPU, so syncs/s cannot grow with them here "
            "and what shows is the per-sync cost (the copies, Python, and the server's "
            "update, all CPU work on one machine). Past this machine each server rank has "
            "its own link and cores: throughput then scales with S until the workers' "
            "links, and the model column is the load each server must carry."
            % (cores, most, max(workers), max(shards)))


if __name__ == "__main__":
    common.script_main(run, child, mpi_regimes.add_regime_arg)
