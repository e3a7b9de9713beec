"""Bytes on each host's link per sum: is the MPI already hierarchical?

On namespace hosts (cluster regime, 1 Gb/s), 2 hosts x 1 rank against 2
hosts x 2 ranks, each host's link bytes per sum, read from the host's own
interface counters (/proc/net/dev of its network namespace) around a
run of repeats, for:

  Allreduce        the MPI library's own in-place float32 Allreduce
  bsp              psgd's collective sync (psgd.create("bsp"), pipelined)
  striped fp16/1bit the striped compressed sum (psgd.compression), where
                   this checkout has it
  two-level ...    the same through psgd.hierarchy: summed into one leader
                   per host over shared memory, the leaders' exchange, a
                   broadcast inside the host
  bmuf fp16/1bit   bmuf's compressed synchronize, flat, two-level through
                   one leader per host, and sliced (PSGD_COMPRESSION_HIERARCHY
                   off, leader and on: psgd/algorithms/two_level.py)

Bytes are exact (the counters see every frame, TCP and Ethernet headers
included; the repeats' barriers add a few hundred bytes); times are the
slowest rank's median and noisy on a loaded machine (the load average is
recorded). The minimum, what a hierarchical bandwidth-optimal allreduce must
send each way over each host's link, is 2 (H-1)/H of the buffer whatever
the ranks per host (benchmarks/cluster.py, link_floor).

  python benchmarks/cluster_hierarchy.py [--quick] [--cluster-name NAME]
                                         [--only TEXT]
run once with each MPI's python (MPICH's, Open MPI's): each run measures
its own MPI and renders both from their saved results. --only TEXT
measures the exchanges whose name holds TEXT and keeps the saved rows of
the others.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
import common  # noqa: E402

TITLE = "Across hosts: is the sum hierarchical?"
IFACE = "eth0"
RATE = "1gbit"
SIZES = (10 ** 6, 10 ** 7)
LAYOUTS = ((2, 1), (2, 2))
REPS = 4
STRIPED = ("fp16", "1bit")
FLAVOURS = ("mpich", "openmpi")


def _link_bytes():
    """(sent, received) bytes of this network namespace's IFACE."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == IFACE:
                fields = rest.split()
                return int(fields[8]), int(fields[0])
    raise RuntimeError("no interface %s in /proc/net/dev" % IFACE)


def _exchanges(comm, size):
    """[(name, fn)] of the sums measured at `size`, each a fresh object."""
    from mpi4py import MPI
    import psgd
    from psgd import hierarchy
    data = np.zeros(size, np.float32)
    levels = hierarchy.create(comm)
    bsp = psgd.create("bsp", [np.zeros(size, np.float32)], comm=comm)
    out = [("Allreduce", lambda: comm.Allreduce(MPI.IN_PLACE, [data, MPI.FLOAT], op=MPI.SUM)),
           ("two-level Allreduce", lambda: levels.sum(data, hierarchy.allreduce)),
           ("bsp", lambda: bsp.synchronize(32))]
    try:
        from psgd import compression
    except ImportError:
        return out, levels
    for kind in STRIPED:
        for name, how in (("bmuf %s" % kind, "off"), ("two-level bmuf %s" % kind, "leader"),
                          ("sliced bmuf %s" % kind, "on")):
            out.append((name, _bmuf(comm, size, kind, how)))
        flat = compression.StripedSum(comm, size, np.float32, compression.quantizer(kind))
        out.append(("striped %s" % kind, lambda s=flat: s.sum(data)))
        if levels.is_leader:
            inner = compression.StripedSum(levels.leaders, size, np.float32,
                                           compression.quantizer(kind))
        else:
            inner = None
        out.append(("two-level striped %s" % kind,
                    lambda s=inner: levels.sum(data, lambda _, a: s.sum(a))))
    return out, levels


_live = {}


def _bmuf(comm, size, kind, how):
    """bmuf's compressed sync, built at its first call (one such model at a
    time: the previous one is stopped and closed, collectively)."""
    def sync():
        import psgd
        from psgd import settings
        if _live.get("name") != (kind, how):
            if _live:
                _live["alg"].stop(0)
                _live["alg"].close()
            old = settings.set("PSGD_COMPRESSION_HIERARCHY", how)
            try:
                _live["alg"] = psgd.create("bmuf", [np.zeros(size, np.float32)], comm=comm,
                                           compression=kind)
            finally:
                settings.set("PSGD_COMPRESSION_HIERARCHY", old)
            _live["name"] = (kind, how)
        _live["alg"].synchronize(32)
    return sync


def child(argv):
    from mpi4py import MPI
    p = common.child_args()
    p.add_argument("--sizes", required=True)
    p.add_argument("--reps", type=int, default=REPS)
    p.add_argument("--only", default="")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    counts = local.rank == 0
    local.Free()
    rows = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        exchanges, levels = _exchanges(comm, size)
        for name, fn in exchanges:
            if args.only not in name:
                continue
            fn()                                 # connections and first-touch outside
            comm.Barrier()
            before = _link_bytes() if counts else None
            times = []
            for _ in range(args.reps):
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            comm.Barrier()
            after = _link_bytes() if counts else None
            slowest = np.array(times)
            comm.Allreduce(MPI.IN_PLACE, [slowest, MPI.DOUBLE], op=MPI.MAX)
            link = comm.gather((MPI.Get_processor_name(), before, after) if counts else None)
            if comm.rank == 0:
                hosts = {h: ((a[0] - b[0]) / args.reps, (a[1] - b[1]) / args.reps)
                         for h, b, a in (x for x in link if x)}
                rows.append(dict(size=size, exchange=name, hosts=hosts,
                                 times=slowest.tolist()))
        levels.close()
    if _live:
        _live.pop("alg").stop(0)
        _live.clear()
    if comm.rank == 0:
        common.save_json(args.out, dict(rows=rows, ranks=comm.size))


def _launch(placement, out, sizes, reps, only="", timeout=1800):
    """The child across the hosts with this python's MPI (both launchers)."""
    spec = ",".join("%s:%d" % hp for hp in placement)
    n = sum(r for _, r in placement)
    here = os.path.dirname(sys.executable)
    if common.mpi_flavour() == "mpich":
        launcher, place = os.path.join(here, "mpiexec"), ["-hosts", spec]
    else:
        launcher, place = os.path.join(here, "mpirun"), [
            "--host", spec, "--map-by", "slot:oversubscribe"]
    cmd = [sys.executable, cluster.TOOL, "mpirun"] + place + ["-n", str(n), sys.executable,
                                                              "-u", os.path.abspath(__file__),
                                                              "--child", "--out", out,
                                                              "--sizes", sizes, "--reps",
                                                              str(reps), "--only", only]
    env = cluster._env(common.child_env(dict(
        MPIEXEC=launcher, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"),
        pin_blas=True))
    common.run_job(cmd, env, timeout, "across hosts " + spec)
    return common.load_json(out)


def run(quick=False, cluster_name=None, only=""):
    if os.geteuid() != 0:
        return cluster.skipped(TITLE, "namespace hosts need root (ip netns, unshare)")
    if cluster_name:
        cluster.NAME = cluster_name
    flavour = common.mpi_flavour()
    sizes = ",".join(str(s) for s in (SIZES[:1] if quick else SIZES))
    runs = []
    with cluster.hosts(2, RATE):
        for count, per_host in LAYOUTS:
            load = common.load_average()[0]
            out = "cluster_hierarchy_%s_child.json" % flavour
            data = _launch(cluster.layout(count, per_host), out, sizes, 2 if quick else REPS,
                           only)
            data.update(mpi=flavour, hosts=count, per_host=per_host,
                        load=[load, common.load_average()[0]])
            for row in data["rows"]:
                row["load"] = data["load"]      # rows merged by --only keep their own
            runs.append(data)
            print("   %s %dx%d done" % (flavour, count, per_host), flush=True)
    if only and os.path.exists(common.result_path(_saved(flavour))):
        runs = _merged(common.load_json(_saved(flavour))["runs"], runs)
    common.save_json(_saved(flavour), {"runs": runs, "quick": quick})
    return rerender()


def _merged(saved, new):
    """The saved runs with the new rows put in (replacing the same size and
    exchange of the same layout), their rows in the order measured."""
    key = (lambda r: (r["hosts"], r["per_host"]))
    fresh = {key(r): r for r in new}
    for r in saved:
        more = fresh.get(key(r))
        if more is not None:
            got = {(x["size"], x["exchange"]) for x in more["rows"]}
            r["rows"] = [x for x in r["rows"] if (x["size"], x["exchange"]) not in got]
            r["rows"] += more["rows"]
    return saved


def report(runs):
    headers = ["MPI", "hosts x ranks", "parameters", "exchange", "sent per host",
               "received per host", "vs minimum", "time (median)", "load"]
    rows = []
    for r in runs:
        for row in r["rows"]:
            sent = _sent(row)
            received = max(v for _, v in row["hosts"].values())
            minimum = 2 * (r["hosts"] - 1) / r["hosts"] * 4 * row["size"]
            rows.append([r["mpi"], "%d x %d" % (r["hosts"], r["per_host"]),
                         common.fmt_size(row["size"]), row["exchange"], common.fmt_bytes(sent),
                         common.fmt_bytes(received), "%.2fx" % (max(sent, received) / minimum),
                         common.fmt_time(common.median(row["times"])),
                         "%.1f-%.1f" % tuple(row.get("load", r["load"]))])
    return common.Section(TITLE, "\n".join(_markdown(headers, rows)), _headlines(runs),
                          {"runs": runs})


def _sent(row):
    return max(s for s, _ in row["hosts"].values())


def _headlines(runs):
    """Per MPI, at the largest size: bytes per sum at 2 x 2 over 2 x 1's."""
    out = []
    for flavour in FLAVOURS:
        by = {(r["per_host"], row["exchange"]): row for r in runs if r["mpi"] == flavour
              for row in r["rows"] if row["size"] == max(x["size"] for x in r["rows"])}
        cells = ["%s %.2fx" % (name, _sent(by[2, name]) / _sent(by[1, name]))
                 for per_host, name in by if per_host == 2 and (1, name) in by]
        if cells:
            size = common.fmt_size(by[next(iter(by))]["size"])
            out.append("link bytes per sum across 2 hosts, 2 ranks per host over 1 (%s, %s): "
                       "%s" % (flavour, size, ", ".join(cells)))
    return out


def _markdown(headers, rows):
    return ["One in-place float32 sum across 2 hosts at %s, with 1 and 2 ranks per host: "
          "the MPI library's `Allreduce`, psgd's bsp `synchronize` (pipelined across "
          "hosts), the striped compressed sum (`psgd.compression`) and the same through "
          "`psgd.hierarchy` (`two-level`: summed into one leader per host over shared "
          "memory, the exchange among the leaders, a broadcast inside the host), and "
          "bmuf's compressed `synchronize` (count and sum) flat, two-level through one leader "
          "per host, and sliced (each host's ranks reduce-scatter the sum, rank i of every "
          "host exchanges slice i, an all-gather inside the host; "
          "`PSGD_COMPRESSION_HIERARCHY=off`, `leader` and `on`; auto picks sliced at 2 x 2). "
          "`sent` "
          "and `received`: bytes per sum on the busier host's link, from the host's own "
          "interface counters (exact, TCP/IP headers included); `vs minimum`: against "
          "2 (H-1)/H x 4 bytes x parameters, what a host-aware uncompressed allreduce "
          "must send each way, whatever the ranks per host. Time: the slowest rank's "
          "median over the repeats, noisy at this load (`load`: the 1-minute load "
          "average before and after the job)." % RATE, "", cluster.NOTE, "",
          common.table(headers, rows)]


def _saved(flavour):
    return "cluster_hierarchy_%s.json" % flavour


def rerender():
    """Both MPIs' saved runs (each measured by its own python) in one table."""
    runs = []
    for flavour in FLAVOURS:
        if os.path.exists(common.result_path(_saved(flavour))):
            runs += common.load_json(_saved(flavour))["runs"]
    return report(runs)


def _arguments(p):
    p.add_argument("--only", default="", help="measure the exchanges whose name holds "
                   "this text; keep the saved rows of the others")
    p.add_argument("--cluster-name", help="the namespace cluster's name (default: %s), "
                   "to run beside others' clusters" % cluster.NAME)


if __name__ == "__main__":
    common.script_main(run, child, _arguments)
