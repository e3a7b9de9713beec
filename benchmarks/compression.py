"""Compression on the wire: bytes and time per sync, and the cost of packing.

1. Packing (one process, no MPI): each quantizer's encode (Q and the
   residual update) and decode over a float32 buffer, against a plain
   memcpy of the uncompressed buffer and against np.packbits of its signs
   alone, interleaved, medians.
2. A bmuf sync per quantizer against bmuf without compression (interleaved
   in one job, the slowest rank after a barrier, medians), and the bytes each
   rank sends per sync: a ring Allreduce of float32 sends 2 (P-1)/P of the
   buffer; the striped sum sends the same share of its quantized messages.

--regime shm | network (benchmarks/mpi_regimes.py) runs on this machine;
--regime cluster runs 2 hosts x 1 and x 2 ranks at 1 Gb/s on namespace hosts
(benchmarks/cluster.py; needs the cluster tool and root).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

KINDS = ("none", "fp16", "bf16", "1bit")
TITLE = "Compression on the wire"


def _once(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# N(0,1), and the scale of error-fed gradients, where fp16's subnormals and
# mixed masks once hid slow paths
SCALES = (1.0, 1e-4)


def _passes():
    """The quantizers' passes to time: compiled (Numba, where installed) and NumPy's."""
    import importlib.util
    return (["compiled"] if importlib.util.find_spec("numba") else []) + ["numpy"]


def packing(sizes, quick):
    """Rows of each quantizer's encode and decode time beside a memcpy and
    np.packbits of the same buffer, for each size, value scale and passes."""
    from psgd import jit, settings
    rows = []
    for passes in _passes():
        previous = settings.set("PSGD_ACCEL", "auto" if passes == "compiled" else "numpy")
        # below jit.MIN_SIZE a job runs NumPy's passes whatever is installed
        chosen = [n for n in sizes if passes == "numpy" or n >= jit.MIN_SIZE]
        try:
            rows += [dict(r, passes=passes) for r in _packing(chosen, quick)]
        finally:
            settings.set("PSGD_ACCEL", previous)
    return rows


def _packing(sizes, quick):
    from psgd.compression import quantizer
    rows = []
    for size, scale in ((size, scale) for size in sizes for scale in SCALES):
        rng = np.random.default_rng(0)
        u = (rng.standard_normal(size) * scale).astype(np.float32)
        copy = np.empty_like(u)
        reps = 5 if quick else (11 if size >= 10 ** 7 else 31)
        for kind in KINDS[1:]:
            q = quantizer(kind)
            wire = np.zeros(q.nbytes(size), np.uint8)
            out = np.empty_like(u)
            work = u.copy()

            def encode():
                work[...] = u          # the same input each time (timed apart: memcpy)
                q.encode(work, wire)

            fns = {"memcpy": lambda: np.copyto(copy, u),
                   "packbits": lambda: np.packbits(u >= 0, bitorder="little"),
                   "encode": encode, "decode": lambda: q.decode(wire, out)}
            med = {k: [] for k in fns}
            for r in range(reps):
                for k, fn in (list(fns.items()) if r % 2 else list(fns.items())[::-1]):
                    med[k].append(_once(fn))
            med = {k: common.median(v) for k, v in med.items()}
            encode_alone = med["encode"] - med["memcpy"]   # less its input refresh
            rows.append({"size": size, "scale": scale, "kind": kind, "memcpy": med["memcpy"],
                         "packbits": med["packbits"], "encode": encode_alone,
                         "decode": med["decode"]})
    return rows


def _bytes_sent(obj, size, P, hosts):
    """What rank 0 sends per sync by the ring-optimal share, 2 (P-1)/P of
    its message among P: on one host the ranks; across H hosts the hosts
    (what must cross a host's link: psgd's two-level sum sends the host's
    sum from its leader, or a slice of it from each of its ranks)."""
    if hosts > 1:
        P = hosts
    if obj.compressed is None:
        return 2 * (P - 1) / P * 4 * size
    striped = obj.compressed.striped
    levels = getattr(striped, "levels", None)
    ranks = 1
    if levels is not None:
        from psgd.algorithms import two_level
        if isinstance(striped, two_level.SlicedSum):
            ranks = levels.local.Get_size()   # the host's ranks send a slice each
        elif not levels.is_leader:
            return 0.0          # its sum stays on its host (only rank 0's is reported)
        striped = striped.striped
    return 2 * (P - 1) / P * int(sum(striped.sizes)) * ranks


def child(argv):
    from mpi4py import MPI
    import psgd
    p = common.child_args()
    p.add_argument("--sizes", required=True)
    p.add_argument("--momentum", default="global")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    P, rows = comm.Get_size(), []
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    hosts = comm.allreduce(1 if local.Get_rank() == 0 else 0)
    local.Free()
    for size in (int(float(s)) for s in args.sizes.split(",")):
        objs = {}
        for kind in KINDS:
            rng = np.random.default_rng(comm.rank)
            shares = {} if kind == "none" else {"compression_momentum": args.momentum}
            objs[kind] = psgd.create("bmuf", [rng.standard_normal(size).astype(np.float32)],
                                     comm=comm, compression=kind, **shares)
        reps = min(common.repeats_for(4 * size, args.quick), 11)

        def step(kind):
            obj = objs[kind]
            obj.buffer.data[:] += np.float32(1e-3)      # a block's training, the same each time
            obj.synchronize(32 + comm.rank)
        for kind in KINDS:
            step(kind)
        times = {k: [] for k in KINDS}
        for r in range(reps):
            for kind in (KINDS if r % 2 == 0 else KINDS[::-1]):
                times[kind].append(common.timed_collective(comm, lambda: step(kind)))
        for kind in KINDS:
            obj = objs[kind]
            rows.append({"size": size, "kind": kind, "sync": common.median(times[kind]),
                         "bytes": _bytes_sent(obj, size, P, hosts)})
            obj.close()
    if comm.rank == 0:
        import json
        with open(args.out, "w") as f:
            json.dump({"np": P, "rows": rows}, f)


def run(quick=False, regime="shm", nps=(2, 4), momentum="global"):
    sizes = [10 ** 5, 10 ** 6] if quick else [10 ** 5, 10 ** 6, 10 ** 7]
    pack = packing(sizes, quick)
    runs = []
    args = ["--sizes", ",".join(map(str, sizes)), "--momentum", momentum] + (
        ["--quick"] if quick else [])
    if regime == "cluster":
        import cluster
        why = cluster.why_not()
        if why:
            return report(pack, [], "cluster not measured: %s" % why)
        with cluster.hosts(2, "1gbit"):
            for count, per_host in cluster.LAYOUTS:
                out = common.result_path("compression_child.json")
                data = cluster.run_child("compression.py", cluster.layout(count, per_host),
                                         out, args, timeout=1800)
                data["regime"] = "cluster 1 Gb/s, %d x %d%s" % (
                    count, per_host, "" if momentum == "global" else ", momentum shares")
                runs.append(data)
    else:
        import mpi_regimes
        for reg in mpi_regimes.regimes(regime):
            for np_ in nps:
                out = common.result_path("compression_np%d_%s.json" % (np_, reg))
                common.results_dir()
                runs.append(mpi_regimes.run_in_regime("compression.py", np_, out, reg, args,
                                                      timeout=1800))
    name = "compression_cluster" if regime == "cluster" else "compression"
    common.save_json(name + ("" if momentum == "global" else "_" + momentum) + ".json",
                     {"packing": pack, "runs": runs})
    return report(pack, runs)


def rerender():
    saved = common.load_json("compression.json")
    try:
        cluster_runs = common.load_json("compression_cluster.json")["runs"]
    except (OSError, ValueError, KeyError):
        cluster_runs = []
    return report(saved["packing"], saved["runs"] + cluster_runs)


def report(pack, runs, note=""):
    md = ["Packing, one process, float32: each quantizer's encode (Q plus the residual "
          "update) and decode against a memcpy of the uncompressed buffer (ratio to the "
          "memcpy) and np.packbits of the signs alone; values N(0,1) times `scale`. "
          "`passes`: compiled with Numba (what a job runs where Numba is installed, for "
          "stripes of 131072 elements or more: psgd/jit.py) or NumPy's (smaller stripes, "
          "PSGD_ACCEL=numpy, or no Numba).", ""]
    md += common.table(["passes", "parameters", "scale", "quantizer", "memcpy", "np.packbits",
                        "encode", "decode"],
                       [[r.get("passes", "numpy"), common.fmt_size(r["size"]),
                         "%g" % r.get("scale", 1.0), r["kind"],
                         common.fmt_time(r["memcpy"]),
                         "%s (%.2fx)" % (common.fmt_time(r["packbits"]),
                                         r["packbits"] / r["memcpy"]),
                         "%s (%.2fx)" % (common.fmt_time(r["encode"]), r["encode"] / r["memcpy"]),
                         "%s (%.2fx)" % (common.fmt_time(r["decode"]), r["decode"] / r["memcpy"])]
                        for r in pack]).splitlines()
    headline = _packing_headline(pack)
    if runs:
        md += ["", "A bmuf sync per quantizer against `none` (medians, interleaved, slowest "
               "rank), and the bytes rank 0 sends per sync by the ring-optimal share (2 (P-1)/P "
               "of the message among the P ranks of one host, or among the host leaders "
               "across hosts: what must cross a host's link).", ""]
        rows = []
        for run in runs:
            by = {(r["size"], r["kind"]): r for r in run["rows"]}
            for size in sorted({r["size"] for r in run["rows"]}):
                none = by[(size, "none")]
                cells = [run.get("regime", "shm"), run["np"], common.fmt_size(size),
                         "%s, %s" % (common.fmt_time(none["sync"]), common.fmt_bytes(none["bytes"]))]
                for kind in KINDS[1:]:
                    r = by[(size, kind)]
                    cells.append("%.2fx time, 1/%.1f bytes" % (r["sync"] / none["sync"],
                                                               none["bytes"] / r["bytes"]))
                rows.append(cells)
        md += common.table(["regime", "np", "parameters", "none"] + list(KINDS[1:]),
                           rows).splitlines()
    if note:
        md += ["", note + "."]
    return common.Section(TITLE, "\n".join(md), headline)


def _packing_headline(pack):
    """The worst compiled pass against its memcpy, over the sizes the
    compiled passes take (issue 29's goal: 1.5x)."""
    rows = [r for r in pack if r.get("passes") == "compiled"]
    if not rows:
        return []
    worst = []
    for k in ("encode", "decode"):
        r = max(rows, key=lambda row: row[k] / row["memcpy"])
        worst.append("%s at most %.2fx (%s at %s)" % (k, r[k] / r["memcpy"], r["kind"],
                                                       common.fmt_size(r["size"])))
    sizes = " and ".join(common.fmt_size(n) for n in sorted({r["size"] for r in rows}))
    return ["packing at %s, compiled passes, against a memcpy of the buffer (goal 1.5x): %s"
            % (sizes, ", ".join(worst))]


def main():
    if "--child" in sys.argv:
        common.child_main(child, sys.argv[1:])
        return
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--regime", default="shm", choices=("shm", "network", "both", "cluster"))
    p.add_argument("--momentum", default="global", choices=("global", "local"),
                   help="bmuf's compression_momentum in the compressed syncs (local: the "
                        "trainer's momentum shares)")
    args = p.parse_args()
    print(run(quick=args.quick, regime=args.regime, momentum=args.momentum).markdown)


if __name__ == "__main__":
    main()
