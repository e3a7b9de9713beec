"""Parameter servers across hosts (cluster regime): the round trip of one
worker, and sharded servers S = 1, 2, 3, each server on a host of its own
and every worker on another, with the bytes per second through the servers
against what their links allow.

The child of server_throughput.py (asgd, and easgd at S = 1 and 2: ranks
0..S-1 serve, the others sync back to back for a fixed time), one rank per namespace host, so every
byte between a worker and a server crosses both hosts' links. A sync moves
the model's bytes each way (a delta in, the center out), split over the
shards. What the links allow: min(S, N) links' rate in each direction (the
servers' S links and the workers' N links carry the same bytes).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
import common  # noqa: E402
from psgd import pieces  # noqa: E402

# (servers S, workers N): S = 3 with 3 workers, so that neither side's links
# are fewer than the servers'
SHAPES = ((1, 1), (1, 2), (2, 2), (3, 3))
# (algo, shapes, PSGD_TCP_BUFFER: 0 is the kernel's autotuning, psgd's
# default). easgd's server answers with blocking Sendrecvs, in eager pieces
# across hosts (psgd/pieces.py): the shapes where that differs from asgd's
# pipelined pieces. And asgd with 256 KiB socket buffers (psgd/_tcp_buffers.py).
SMALL_SOCKETS = 2 ** 18
PLAN = (("asgd", SHAPES, 0), ("easgd", SHAPES[:3], 0),
        ("asgd", SHAPES[1:], SMALL_SOCKETS))
SIZE = 10 ** 7
# The same job's steady share moves by up to 0.07 from one run to the next
# here (benchmarks/FINDINGS.md): every shape runs in this many interleaved
# rounds, and the table shows the run with the median steady share.
ROUNDS = 3
TARGET = 0.90
TITLE = "Across hosts: parameter servers and their links"


def run(quick=False):
    why = cluster.why_not()
    if why:
        return cluster.skipped(TITLE, why)
    size = 10 ** 6 if quick else SIZE
    rates = cluster.RATES[:1] if quick else cluster.RATES
    plan = [(a, shapes[:2] if quick else shapes, tcp) for a, shapes, tcp in PLAN]
    runs = []
    for rate in rates:
        with cluster.hosts(max(s + n for s, n in SHAPES), rate):
            for algo, shapes, tcp in plan * (1 if quick else ROUNDS):     # round after round
                env = {"PSGD_TCP_BUFFER": str(tcp)}
                for s, n in shapes:
                    out = common.result_path("cluster_servers_child.json")
                    load = common.load_average()[0]
                    data = cluster.run_child(
                        "server_throughput.py", cluster.layout(s + n, 1), out,
                        ["--sizes", size, "--servers", s, "--duration", 2 if quick else 8,
                         "--bare", "--algo", algo], timeout=600, env=env)
                    data.update(rate=rate, load=[load, common.load_average()[0]],
                                tcp_buffer=tcp)
                    runs.append(data)
                    print("   %s %s S=%d N=%d sockets %s done" % (
                        rate, algo, s, n, sockets(data)), flush=True)
    common.save_json("cluster_servers.json", {"runs": runs, "quick": quick})
    return report(runs)


def steady_share(run):
    """The steady share of a run (the whole run's, from before it)."""
    row = run["rows"][0]
    return (row.get("steady_bytes_per_s") or row["servers_bytes_per_s"]) / allowed(run)


def median_runs(runs):
    """[(the run with the median steady share, every run's share, sorted)]
    per shape (algo, rate, sockets, S, N), in the order shapes first ran."""
    shapes = {}
    for r in runs:
        key = (r.get("algo", "asgd"), r["rate"], r.get("tcp_buffer"), r["servers"], r["workers"])
        shapes.setdefault(key, []).append(r)
    picked = []
    for same in shapes.values():
        ranked = sorted(same, key=steady_share)
        picked.append((ranked[(len(ranked) - 1) // 2], [steady_share(r) for r in ranked]))
    return picked


def rerender():
    return report(common.load_json("cluster_servers.json")["runs"])


def sockets(run):
    """MPI's socket buffers in the job: PSGD_TCP_BUFFER's, or the kernel's."""
    size = run.get("tcp_buffer")
    return "%d KiB" % (size >> 10) if size else "kernel"    # None: from before the setting


def allowed(run):
    """Bytes per second the links allow through the servers, both directions."""
    links = min(run["servers"], run["workers"])
    return 2 * links * cluster.RATE_BITS[run["rate"]] / 8


def report(runs):
    rows, heads = [], []
    for r, shares in median_runs(runs):
        row = r["rows"][0]
        one_way = 4 * row["size"] * 8 / cluster.RATE_BITS[r["rate"]]
        share = row["servers_bytes_per_s"] / allowed(r)
        trip = row["wall_s"] / row["syncs"] * r["workers"]
        bare = row.get("bare_bytes_per_s")
        bare_share = bare / allowed(r) if bare else None
        arithmetic = row.get("bare_arithmetic_bytes_per_s")   # None: from before it
        steady = row.get("steady_bytes_per_s")
        held = steady_share(r)      # what the goal is checked on
        rows.append([r.get("algo", "asgd"), r["rate"], sockets(r), r["servers"], r["workers"],
                     common.fmt_size(row["size"]),
                     row["syncs"], "%.2f s" % trip, "%.2fx" % (trip / one_way),
                     "%s/s" % common.fmt_bytes(row["servers_bytes_per_s"]),
                     "%s/s" % common.fmt_bytes(allowed(r)), "%.2f" % share,
                     "%.2f%s" % (held, "" if held >= TARGET or r["workers"] == 1 else " (!)")
                     if steady else "-",
                     spread(shares),
                     "%.2f" % bare_share if bare else "-",
                     "%.2f" % (arithmetic / allowed(r)) if arithmetic else "-",
                     "%.2f" % ((steady or row["servers_bytes_per_s"]) / bare) if bare else "-",
                     "%.0f%%" % (100 * row["server_cpu_share"]), "%.1f-%.1f" % tuple(r["load"])])
        if r["workers"] > 1:
            # results from before the steady share have the whole run's only
            measured = ("%.2f of what their links allow while every worker syncs (%.2f "
                        "over the whole run; " % (held, share) if steady else
                        "%.2f of what their links allow over the whole run (" % share)
            heads.append("%s servers across hosts at %s, sockets %s, S = %d, N = %d: %s%s/s "
                         "through the servers%s)%s%s" % (
                             r.get("algo", "asgd"), r["rate"], sockets(r), r["servers"],
                             r["workers"],
                             measured, common.fmt_bytes(row["servers_bytes_per_s"]),
                             "; the median of %d runs, %s" % (len(shares), spread(shares))
                             if len(shares) > 1 else "",
                             "; a bare MPI exchange of the same bytes %.2f" % bare_share
                             if bare else "",
                             ", %.2f with the workers' arithmetic" % (arithmetic / allowed(r))
                             if arithmetic else ""))
    md = ["asgd (and easgd) with S servers and N workers, one rank per namespace host, the servers "
          "on hosts h0..h{S-1} and the workers on the others; every worker syncs back to "
          "back (push a delta, pull the center) for a fixed time. `per sync`: wall time "
          "per sync of one worker (for N = 1 the server round trip), and against the "
          "time the model's bytes take on one link one way (bytes / rate: the links are "
          "full duplex, so the delta in and the center out can share that time). `through servers`: the bytes per second "
          "every server received and sent together; `allowed`: min(S, N) links' rate "
          "each way, both directions; `share`: the two's ratio over the whole run (start-up "
          "and wind-down included); `steady`: the same while every worker syncs (between "
          "the last worker's first sync end and the first worker's last, each worker's "
          "syncs over its own first and last end in that span: a training run's thousands "
          "of syncs are this), (!) below the %.2f goal. Each shape runs in interleaved "
          "rounds, and its row is the run with the median steady share, `runs` "
          "every run's. "
          "`bare`: the share of a bare MPI exchange of the same bytes in the same job "
          "(the median of 4 rounds before the syncs and 4 after; every worker sends each server its shard and receives it back, "
          "every piece posted at once, no update, no control message, one Waitall: what "
          "MPI itself moves in this shape here, the limit of any server protocol over it); "
          "`+ arithmetic`: the same bare exchange with asgd's worker arithmetic beside it "
          "(each piece's delta formed just before it is posted, the model copied from the "
          "pulled center once all is in: memory passes that every rank here does on the "
          "same 2 cores, where a real host does them on its own); "
          "`vs bare`: psgd's bytes per second (steady) over the bare exchange's. "
          "`sockets`: the buffers of MPI's TCP sockets between the hosts, "
          "PSGD_TCP_BUFFER's (psgd/_tcp_buffers.py) or the kernel's autotuning "
          "(PSGD_TCP_BUFFER=0), the bare exchange's alike. "
          "`server CPU`: the busiest server's CPU time over its wall time. `load`: the "
          "machine's 1-minute load average before and after the job. asgd's model messages go "
          "in the server piece of ranks that span hosts (%s elements), the worker's all "
          "posted at once, the server's receives %d pieces ahead of the one it serves; "
          "easgd's server answers with blocking Sendrecvs of %s KiB (eager) pieces "
          "(psgd/pieces.py, benchmarks/FINDINGS.md), its workers in line (overlap "
          "never: with no compute between syncs there is nothing to hide). With S > 1 "
          "a worker meets its servers in turns, each turn's push after its server's READY, "
          "and takes the pulled shards into its model as they land (docs/protocol.md)." % (
              TARGET, "{:,}".format(pieces.ACROSS_HOSTS_PIECE), pieces.RECEIVES_AHEAD,
              pieces.EAGER_PIECE_BYTES >> 10),
          "",
          cluster.NOTE, "",
          common.table(["algo", "rate", "sockets", "S", "N", "parameters", "syncs", "per sync",
                        "vs bytes / rate", "through servers", "allowed", "share", "steady",
                        "runs", "bare", "+ arithmetic",
                        "vs bare", "server CPU", "load"], rows), ""]
    return common.Section(TITLE, "\n".join(md), heads, runs)


def spread(shares):
    """Every run's steady share, lowest first."""
    return ", ".join("%.2f" % x for x in shares)


if __name__ == "__main__":
    common.script_main(run)
