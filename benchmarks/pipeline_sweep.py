"""Chunk size of the pipelined exchange (psgd/pipeline.py): one bsp and one bmuf
`synchronize` per setting (elements per chunk x chunks in flight x MPI
progress Tests during the update or none), against a bare Allreduce of the
same bytes and the same sync in one call, all interleaved in one job.

    .venv/bin/python benchmarks/pipeline_sweep.py --regime both --sizes 1e6,1e7

Prints one line per (regime, size): median sync / median bare Allreduce for
each setting. Not part of run_all: it chose the defaults in psgd/pipeline.py.
"""
import argparse
import itertools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mpi_regimes  # noqa: E402

CHUNKS = (1 << 18, 1 << 19, 1 << 20)
DEPTHS = (1, 2)
PROGRESS = (1 << 16, None)   # Test every 64k elements, or never


def child(argv):
    from mpi4py import MPI
    import psgd
    from psgd import pipeline, settings
    p = common.child_args()
    p.add_argument("--size", type=float, required=True)
    p.add_argument("--reps", type=int, default=11)
    args = p.parse_args(argv)
    comm, size = MPI.COMM_WORLD, int(args.size)
    raw = np.zeros(size, np.float32)
    objs = {m: psgd.create(m, [np.full(size, 1.0 + 0.01 * comm.rank, np.float32)], comm=comm)
            for m in ("bsp", "bmuf")}

    def setting(m, chunk, depth=2, progress=1 << 16, threshold=0):
        def fn():
            old = (settings.set("PSGD_MPI_PIPELINE_CHUNK", chunk),
                   settings.set("PSGD_MPI_PIPELINE_THRESHOLD", threshold))
            saved = pipeline.PIPELINE_DEPTH, pipeline.PROGRESS_BLOCK
            pipeline.PIPELINE_DEPTH, pipeline.PROGRESS_BLOCK = depth, progress or 2 ** 62
            try:
                objs[m].synchronize(32 + comm.rank)
            finally:
                settings.set("PSGD_MPI_PIPELINE_CHUNK", old[0])
                settings.set("PSGD_MPI_PIPELINE_THRESHOLD", old[1])
                pipeline.PIPELINE_DEPTH, pipeline.PROGRESS_BLOCK = saved
        return fn

    fns = [("bare", lambda: comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM))]
    for m in objs:
        fns.append((m + " one call", setting(m, 2 ** 30, threshold=2 ** 62)))
        for chunk, depth, progress in itertools.product(CHUNKS, DEPTHS, PROGRESS):
            if chunk < size:
                fns.append(("%s %dk d%d %s" % (m, chunk >> 10, depth, "test" if progress else
                                               "no-test"), setting(m, chunk, depth, progress)))
    times = {k: [] for k, _ in fns}
    for r in range(args.reps):
        for k, fn in (fns if r % 2 == 0 else fns[::-1]):
            times[k].append(common.timed_collective(comm, fn))
    for obj in objs.values():
        obj.stop(0)
    if comm.rank == 0:
        import json
        bare = common.median(times["bare"])
        with open(args.out, "w") as f:
            json.dump({"size": size, "bare": bare,
                       "ratios": {k: common.median(v) / bare for k, v in times.items()}}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mpi_regimes.add_regime_arg(p)
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--reps", type=int, default=11)
    args = p.parse_args()
    for regime in mpi_regimes.regimes(args.regime):
        for size in args.sizes.split(","):
            out = common.result_path("pipeline_sweep_%s_%s.json" % (regime, size))
            data = mpi_regimes.run_in_regime("pipeline_sweep.py", args.np, out, regime,
                                        ["--size", size, "--reps", str(args.reps)])
            print("%s %s (bare %s): %s" % (regime, size, common.fmt_time(data["bare"]), ", ".join(
                "%s %.2fx" % kv for kv in data["ratios"].items() if kv[0] != "bare")), flush=True)


if __name__ == "__main__":
    if "--child" in sys.argv:
        common.child_main(child, sys.argv[1:])
    else:
        main()
