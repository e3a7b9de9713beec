"""numexpr against plain NumPy for the fused sync updates (psgd/kernels.py).

One process, no MPI: `kernels.bmuf_update` and `kernels.lerp` timed with
PSGD_ACCEL=auto (numexpr above kernels.NUMEXPR_MIN_SIZE elements) and
PSGD_ACCEL=numpy, interleaved, medians; numexpr at 1 thread and at its
default thread count. The cost is also given in GB/s of the arrays the
update must touch at least once (bmuf: read w, w_g, D and write them back,
24 bytes per float32 parameter; lerp: read a, b, write a, 12 bytes), so
the figures compare with the machine's memory bandwidth (the copy row).
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MIN_BYTES = {"bmuf": 24, "lerp": 12, "copy": 8}


def _time(fn, reps):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return common.median(times)


def measure(sizes, quick=False):
    from psgd import kernels
    numexpr = kernels.numexpr
    default_threads = numexpr.nthreads if numexpr is not None else 0
    cores = numexpr.detect_number_of_cores() if numexpr is not None else 0
    variants = [("numpy", None)]
    if numexpr is not None:
        variants += [("numexpr 1 thread", 1)]
        if cores > 1:
            variants += [("numexpr %d threads" % cores, cores)]
    rows = []
    for size in sizes:
        w = np.full(size, 1.0, np.float32)
        g = np.full(size, 0.5, np.float32)
        d = np.zeros(size, np.float32)
        b = np.full(size, 2.0, np.float32)
        ops = {
            "bmuf": lambda: kernels.bmuf_update(w, g, d, 0.75, 1.0, True),
            "lerp": lambda: kernels.lerp(w, b, 0.225),
            "copy": lambda: np.copyto(w, b),
        }
        nbytes = 4 * size
        reps = common.repeats_for(nbytes, quick) * 2
        for op, fn in ops.items():
            times = {name: [] for name, _ in variants}
            for r in range(reps):
                order = variants if r % 2 == 0 else variants[::-1]
                for name, threads in order:
                    if threads is None:
                        os.environ["PSGD_ACCEL"] = "numpy"
                    else:
                        os.environ["PSGD_ACCEL"] = "auto"
                        numexpr.set_num_threads(threads)
                    times[name].append(_time(fn, 1))
                    if op == "copy":
                        break      # no accelerated variant: time it once per round
            for name, ts in times.items():
                if not ts:
                    continue
                t = common.median(ts)
                rows.append({"op": op, "size": size, "variant": name, "seconds": t,
                             "gbps": MIN_BYTES[op] * size / t / 1e9})
        del w, g, d, b
    if numexpr is not None:
        numexpr.set_num_threads(default_threads)
    os.environ.pop("PSGD_ACCEL", None)
    return {"rows": rows, "variants": [v for v, _ in variants],
            "numexpr_min_size": kernels.NUMEXPR_MIN_SIZE}


def run(quick=False):
    sizes = [10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7] + ([] if quick else [10 ** 8])
    for k, v in common.THREAD_ENV.items():
        os.environ.setdefault(k, v)
    data = measure(sizes, quick)
    common.save_json("accel.json", data)
    return report(data, sizes)


def report(data, sizes):
    rows = data["rows"]
    variants = data["variants"]
    by = {(r["op"], r["size"], r["variant"]): r for r in rows}
    md = ["One process, no MPI; median time of one call (and GB/s over the bytes the "
          "update must touch at least once). `auto` uses numexpr from %d elements up "
          "(kernels.NUMEXPR_MIN_SIZE); below that both columns run NumPy." %
          data["numexpr_min_size"], ""]
    heads = []
    for op in ("bmuf", "lerp"):
        table_rows, wins = [], []
        for size in sizes:
            cells = [common.fmt_size(size)]
            best = None
            for v in variants:
                r = by.get((op, size, v))
                if r is None:
                    cells.append("-")
                    continue
                cells.append("%s (%.1f GB/s)" % (common.fmt_time(r["seconds"]), r["gbps"]))
                if best is None or r["seconds"] < best[1]:
                    best = (v, r["seconds"])
            c = by.get(("copy", size, "numpy"))
            cells.append("%.1f GB/s" % c["gbps"] if c else "-")
            numpy_t = by[(op, size, "numpy")]["seconds"]
            cells.append("%s (%.2fx numpy)" % (best[0], numpy_t / best[1]))
            wins.append((size, best[0]))
            table_rows.append(cells)
        md.append("**%s** (`kernels.%s`)" % (op, "bmuf_update" if op == "bmuf" else "lerp"))
        md.append("")
        md.append(common.table(["elements"] + variants + ["np.copyto", "fastest"], table_rows))
        md.append("")
        heads.append("%s kernel fastest: %s" % (op, ", ".join(
            "%s %s" % (common.fmt_size(s), v) for s, v in wins)))
    return common.Section("numexpr against NumPy for the sync updates", "\n".join(md), heads, data)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv).markdown)
