"""GPU staging: psgd's staged exchange (device -> pinned mirror -> MPI ->
pinned mirror -> device, psgd.mpi.Exchange without CUDA-aware MPI) against
its parts measured alone in the same job: a plain host Allreduce of the same
bytes, and the two copies (device -> pinned host, pinned host -> device) at
PCIe speed. The staged path should cost their sum and no more; the ratio
staged / (Allreduce + D2H + H2D) is the figure. A bsp `synchronize` on the
device buffer (staging plus the scale kernel and the counts Allreduce) is
timed too. Where NCCL loads, a bsp `synchronize` through the NCCL exchange
is set against a bare NCCL allreduce of the same buffer on the same stream
(the figure: nccl sync / bare NCCL).

Needs CuPy and a CUDA device on every rank; without them the section is
skipped with a note (this is the only benchmark that needs a GPU).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def gpu_available():
    """(True, device name) or (False, why not)."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver: both mean no GPU here
        return False, "CuPy or a CUDA driver is not available (%s)" % type(exc).__name__
    if count < 1:
        return False, "CuPy found no CUDA device"
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return True, "%d x %s" % (count, name)


def child(argv):
    from mpi4py import MPI
    import psgd
    from psgd import mpi
    from psgd.backend import get_backend
    from psgd.buffers import FlatBuffer
    from psgd.errors import UsageError
    p = common.child_args()
    p.add_argument("--sizes", required=True)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    backend = get_backend("cupy", mpi.Node(comm).local_rank)
    cupy = backend.xp
    from psgd.nccl import nccl_module
    nccl_lib, nccl_why = nccl_module()
    stream = cupy.cuda.get_current_stream()
    rows = []

    def on_device(fn):
        def timed():
            fn()
            stream.synchronize()
        return timed

    for size in (int(float(s)) for s in args.sizes.split(",")):
        dev = FlatBuffer(cupy.full(size, 1.0, dtype=cupy.float32), [(size,)])
        staged = mpi.Exchange(comm, dev, direct=False)
        host = np.zeros(size, dtype=np.float32)
        mirror = dev.host
        ops = {
            "staged": staged.allreduce,
            "host_allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM),
            "d2h": on_device(lambda: dev.data.get(out=mirror)),
            "h2d": on_device(lambda: dev.data.set(mirror)),
        }
        sync = psgd.create("bsp", [cupy.full(size, 1.0, dtype=cupy.float32)], comm=comm,
                           exchange="mpi")
        ops["bsp_sync"] = on_device(lambda: sync.synchronize(32))
        syncs = [sync]
        by_nccl = None
        if nccl_lib is not None:
            try:                      # refused on every rank alike (ranks sharing a GPU)
                by_nccl = psgd.create("bsp", [cupy.full(size, 1.0, dtype=cupy.float32)],
                                      comm=comm, exchange="nccl")
            except UsageError as exc:
                nccl_why = str(exc)
        if by_nccl is not None:
            syncs.append(by_nccl)
            bare = by_nccl.exchange.nccl          # the same communicator, bare
            data = cupy.full(size, 1.0, dtype=cupy.float32)
            ops["nccl_bare"] = on_device(lambda: bare.allReduce(
                data.data.ptr, data.data.ptr, size, nccl_lib.NCCL_FLOAT32, nccl_lib.NCCL_SUM,
                stream.ptr))
            ops["nccl_sync"] = on_device(lambda: by_nccl.synchronize(32))
        for fn in ops.values():           # first use: pinned allocation, MPI set-up
            fn()
        times = {k: [] for k in ops}
        reps = common.repeats_for(4 * size, args.quick)
        names = list(ops)
        for r in range(reps):
            for k in (names if r % 2 == 0 else names[::-1]):
                times[k].append(common.timed_collective(comm, ops[k]))
        med = {k: common.median(v) for k, v in times.items()}
        parts = med["host_allreduce"] + med["d2h"] + med["h2d"]
        # each repetition ran every op once, side by side: its own ratios
        each_parts = [sum(t) for t in zip(times["host_allreduce"], times["d2h"], times["h2d"])]
        rows.append({"size": size, "median": med, "parts": parts, "reps": reps,
                     "ratios": [s / p for s, p in zip(times["staged"], each_parts)],
                     "bsp_ratios": [s / p for s, p in zip(times["bsp_sync"], each_parts)],
                     "ratio": med["staged"] / parts, "bsp_ratio": med["bsp_sync"] / parts,
                     "nccl_ratio": med["nccl_sync"] / med["nccl_bare"] if "nccl_bare" in med
                     else None,
                     "d2h_gbps": 4 * size / med["d2h"] / 1e9,
                     "h2d_gbps": 4 * size / med["h2d"] / 1e9})
        for each in syncs:
            each.close()
        dev = staged = host = mirror = sync = syncs = ops = None
        cupy.get_default_memory_pool().free_all_blocks()
    if comm.rank == 0:
        import json
        with open(args.out, "w") as f:
            json.dump({"np": comm.size, "cuda_aware": mpi.cuda_aware(), "rows": rows,
                   "no_nccl": nccl_why}, f)


def run(quick=False):
    """np 1 (the copies at full link speed; NCCL on one rank) and np 2 (a
    real exchange; on a one-GPU machine both ranks share the GPU and its
    link, and NCCL refuses them)."""
    ok, what = gpu_available()
    if not ok:
        return common.Section(
            "GPU staging", "Skipped: %s on the machine that ran this benchmark. Run "
            "`benchmarks/gpu_staging.py` on a machine with CuPy and a CUDA device (one "
            "per rank, by local rank) to fill this section." % what,
            ["GPU staging: skipped (%s)" % what], None)
    sizes = [10 ** 6, 10 ** 7] if quick else [10 ** 6, 10 ** 7, 10 ** 8]
    out = common.result_path("gpu_staging.json")
    runs = []
    for np_ in (1, 2):
        data = common.run_child("gpu_staging.py", np_, out,
                                ["--sizes", ",".join(map(str, sizes))] +
                                (["--quick"] if quick else []),
                                env={"PSGD_BACKEND": "cupy", "PSGD_CUDA_AWARE": "0"},
                                timeout=1800)
        data["device"] = what
        runs.append(data)
    summary = {"runs": runs, "machine": common.machine_info()}
    common.save_json("gpu_staging_summary.json", summary)
    return report(summary)


def rerender():
    if not os.path.exists(common.result_path("gpu_staging_summary.json")):
        return run()          # the skip note (or, on a GPU machine, a fresh run)
    return report(common.load_json("gpu_staging_summary.json"))


def ratio(row, name):
    """The ratio of the medians, then the range of the repetitions' own
    ratios where the run kept them."""
    each = row.get(name + "s")
    return "%.3fx" % row[name] + (" [%.2f-%.2f]" % (min(each), max(each)) if each else "")


def table(data):
    rows = []
    for r in data["rows"]:
        m = r["median"]
        nccl = r.get("nccl_ratio")
        rows.append([common.fmt_size(r["size"]), common.fmt_bytes(4 * r["size"]),
                     common.fmt_time(m["host_allreduce"]),
                     "%s (%.1f GB/s)" % (common.fmt_time(m["d2h"]), r["d2h_gbps"]),
                     "%s (%.1f GB/s)" % (common.fmt_time(m["h2d"]), r["h2d_gbps"]),
                     common.fmt_time(m["staged"]), ratio(r, "ratio"),
                     common.fmt_time(m["bsp_sync"]), ratio(r, "bsp_ratio"),
                     common.fmt_time(m["nccl_bare"]) if nccl else "-",
                     common.fmt_time(m["nccl_sync"]) if nccl else "-"])
    md = ["**np %d**, %s, staged path forced (PSGD_CUDA_AWARE=0)." % (
              data["np"], data.get("device", "GPU")), "",
          common.table(["parameters", "bytes", "host Allreduce", "D2H (pinned)",
                        "H2D (pinned)", "staged Allreduce", "staged / parts",
                        "bsp sync", "bsp / parts", "bare NCCL allreduce",
                        "bsp sync through NCCL"], rows)]
    if data.get("no_nccl"):
        md += ["", "No NCCL figures: %s." % data["no_nccl"]]
    return md


def report(summary):
    runs = summary["runs"]
    md = ["Ratios divide by the sum of the parts measured alone in the same job (host "
          "Allreduce + D2H + H2D); each figure is the median of interleaved repetitions, "
          "[the range of the repetitions' own ratios] where the run kept them. "
          "At np 1 the copies run at the link's full speed and NCCL has nothing to move, so "
          "its column shows what a bsp sync through NCCL adds by itself (the scale pass, "
          "the count). At np 2 on a machine with one GPU the two ranks share the GPU and "
          "its link."]
    if summary.get("machine"):
        md += ["", "Measured on: " + "; ".join("%s %s" % kv for kv in summary["machine"].items())
               + "."]
    for data in runs:
        md += [""] + table(data)
    worst = max(r["ratio"] for data in runs for r in data["rows"])
    return common.Section("GPU staging", "\n".join(md),
                          ["GPU staged Allreduce / (host Allreduce + 2 copies): worst %.3fx"
                           % worst], summary)


if __name__ == "__main__":
    common.script_main(run, child)
