"""The Markdown and plot of benchmarks/server_roundtrip.py's results: per
algorithm and size, psgd's round trip against the bare exchange and its
floor in tight, gap and spin mode, and the server's CPU shares."""
import common

ALGOS = ("easgd", "asgd")
WARMUP = 16           # untimed syncs per psgd object (waiting.HISTORY: the waits it learns from)
TARGET = 1.20          # psgd / floor (gap mode), at 1e6 parameters and up
IDLE_CPU_TARGET = 0.10  # the idle server's CPU share


def report(data, sizes):
    by = {(r["size"], r["algo"], r["mode"]): r for r in data["rows"]}
    rows, worst = [], {}
    for algo in ALGOS:
        for size in sizes:
            t, g = by.get((size, algo, "tight")), by.get((size, algo, "gap"))
            sp = by.get((size, algo, "spin"))
            if not t or not g:
                continue
            cells = [algo, common.fmt_size(size), common.fmt_bytes(4 * size),
                     common.fmt_time(t["bare_median"]), "%.3fx" % t["ratio"],
                     common.fmt_time(g["bare_median"]), "%.3fx" % g["ratio"],
                     "%.2fx" % g["floor"], "%.2fx" % g.get("floor_alone", g["floor"]),
                     _ratio(g["ratio"] / g["floor"], size),
                     common.fmt_time(g["gap_s"]),
                     common.fmt_time(g["server_cpu_per_sync"]),
                     common.fmt_time(g["server_busy_per_sync"]),
                     _pct(g["server_idle_share"]), _pct(g.get("server_idle_cpu_share")),
                     _pct(g["server_cpu_share"]),
                     _pct(g["bare_server_cpu_share"]),
                     _pct(g.get("worker_cpu_share")), _pct(g.get("bare_worker_cpu_share")),
                     "%.3fx" % sp["ratio"] if sp else "-",
                     _pct(sp["server_cpu_share"]) if sp else "-"]
            rows.append(cells)
            if size >= 10 ** 6:
                if g["ratio"] / g["floor"] > worst.get(algo, (0,))[0]:
                    worst[algo] = (g["ratio"] / g["floor"], g["ratio"], g["floor"], size)
    headers = ["algo", "parameters", "bytes", "bare (tight)", "psgd/bare (tight)",
               "bare (gap)", "psgd/bare (gap)", "floor (gap)", "floor, update alone",
               "psgd/floor (gap)", "worker gap",
               "server CPU / sync", "server busy / sync", "server idle", "server idle CPU share",
               "server CPU share", "bare server CPU share",
               "worker CPU share in sync", "bare worker CPU share",
               "psgd/bare (spin)", "server CPU share (spin)"]
    md = ["np 2: rank 0 serves, rank 1 syncs. `bare` is the worker's time for the same "
          "bytes with plain mpi4py (easgd: one Sendrecv; asgd: Send then Recv); the ratio "
          "is median psgd `synchronize` / median bare exchange, timed after %d untimed "
          "syncs per psgd object (4 at 1e8), from which the waits learn the rhythm of the "
          "syncs (psgd/algorithms/waiting.py). `tight`: syncs back to "
          "back; `gap`: the worker sleeps (the gap column) between syncs, as if computing. "
          "`floor`: the bare exchange with the worker's elementwise work of a sync around "
          "it (easgd: the lerp; asgd: forming the delta and copying the pulled model), in "
          "the same loop and gap, interleaved with the other two / bare exchange: the "
          "ratio with no plumbing at all; `psgd/floor` is what psgd's waits and plumbing "
          "add to it. `floor, update alone` is the floor as earlier runs took it, (bare "
          "exchange + that work timed alone, back to back) / bare exchange: it understates "
          "the work, which after a gap and an exchange takes about twice as long as hot "
          "(easgd's lerp at 1e6: 0.7 ms against 0.3 ms). "
          "Server columns come from the gap runs (ServerStats): process CPU time per served "
          "sync, wall time serving per sync, the share of its wall time spent waiting for "
          "a message, the CPU time of those idle waits / their wall time (what waiting "
          "costs: spins and wake-ups), and its CPU time / wall time over the whole run "
          "(serving included); the bare server's CPU share is the same figure for a server "
          "that waits in a blocking MPI call. The worker columns: its CPU time inside "
          "its syncs / their wall time (100%%: it polled throughout), psgd's and the bare "
          "exchange's. The `spin` columns repeat the gap "
          "runs with poll_max_sleep=0. (!) marks a psgd/floor ratio above the "
          "%.2fx target at 1e6 parameters and up. %s" % (WARMUP, TARGET, common.BIND_NOTE), "",
          common.table(headers, rows), ""]
    _plot(by, sizes)
    md.append(common.image("server round trip", "server_roundtrip.png"))
    heads = ["server round trip / its floor (gap mode), worst case at >= 1e6 parameters "
             "(target %.2fx; the ratio to a bare exchange / the floor in brackets): " % TARGET
             + ", ".join("%s %.2fx (%.2fx / %.2fx) at %s" % (
                 a, worst[a][0], worst[a][1], worst[a][2], common.fmt_size(worst[a][3]))
                 for a in ALGOS if a in worst)]
    idle = [by[k]["server_idle_cpu_share"] for k in by if k[2] == "gap"
            and by[k].get("server_idle_cpu_share") is not None]
    shares = [by[k]["server_cpu_share"] for k in by if k[2] == "gap"
              and by[k]["server_cpu_share"] is not None]
    if shares:
        heads.append("idle server's CPU share (its idle waits) while the worker computes: at "
                     "most %s (target %s); over the whole run, serving included: at most %s "
                     "(bare blocking server: %s)" % (
                         _pct(max(idle)) if idle else "n/a", _pct(IDLE_CPU_TARGET),
                         _pct(max(shares)), _pct(max(by[k]["bare_server_cpu_share"]
                                                     for k in by if k[2] == "gap"))))
    return common.Section("Server round trip", "\n".join(md), heads, data)


def _ratio(r, size):
    return "%.3fx%s" % (r, " (!)" if size >= 10 ** 6 and r > TARGET else "")


def _pct(x):
    return "n/a" if x is None else "%.1f%%" % (100 * x)


def _plot(by, sizes):
    plt = common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for algo in ALGOS:
        for mode, style in (("tight", "-"), ("gap", "--"), ("spin", ":")):
            xs = [s for s in sizes if (s, algo, mode) in by]
            ax.plot(xs, [by[(s, algo, mode)]["ratio"] / by[(s, algo, mode)]["floor"]
                         for s in xs], style, marker="o",
                    label="%s (%s)" % (algo, mode))
    ax.axhline(TARGET, color="grey", linestyle=":", label="target %.2fx" % TARGET)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("float32 parameters")
    ax.set_ylabel("psgd sync / its floor")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(common.result_path("server_roundtrip.png"), dpi=90)
    plt.close(fig)
