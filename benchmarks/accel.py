"""numexpr against plain NumPy for the fused sync updates (psgd/kernels.py).

One process, no MPI: `kernels.bmuf_update` and `kernels.lerp` timed, the
variants interleaved, medians:
- numpy, blocked: the default host path (kernels.BLOCK elements at a time);
- numpy, whole arrays: the same ops over the whole buffers (BLOCK set past
  the size), what the host path did before blocking;
- numexpr (PSGD_ACCEL=numexpr) at 1 thread and at one thread per core.
The cost is also given in GB/s of the bytes the update must move at least
once (bmuf: read w, w_g, D and write them back, 24 bytes per float32
parameter; lerp: read a, b, write a, 12 bytes), next to np.copyto's rate
(8 bytes per element) as the machine's memory bandwidth for reference.
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


def _variants(kernels, settings):
    """(name, set-up) pairs; each set-up puts kernels into that mode."""
    numexpr = kernels.numexpr
    block = kernels.BLOCK

    def numpy_mode(blocked):
        def setup():
            settings.set("PSGD_ACCEL", "numpy")
            kernels.BLOCK = block if blocked else 1 << 62
        return setup

    def numexpr_mode(threads):
        def setup():
            settings.set("PSGD_ACCEL", "numexpr")
            kernels.BLOCK = block
            numexpr.set_num_threads(threads)
        return setup

    out = [("numpy, blocked (default)", numpy_mode(True)),
           ("numpy, whole arrays", numpy_mode(False))]
    if numexpr is not None:
        cores = numexpr.detect_number_of_cores()
        out.append(("numexpr 1 thread", numexpr_mode(1)))
        if cores > 1:
            out.append(("numexpr %d threads" % cores, numexpr_mode(cores)))
    return out


def measure(sizes, quick=False):
    from psgd import kernels, settings
    saved = (settings.get("PSGD_ACCEL"), kernels.BLOCK,
             kernels.numexpr.nthreads if kernels.numexpr is not None else None)
    variants = _variants(kernels, settings)
    rows = []
    try:
        for size in sizes:
            w = np.full(size, 1.0, np.float32)
            g = np.full(size, 0.5, np.float32)
            d = np.zeros(size, np.float32)
            b = np.full(size, 2.0, np.float32)
            ops = {
                "bmuf": lambda: kernels.bmuf_update(w, g, d, 0.75, 1.0, True),
                "lerp": lambda: kernels.lerp(w, b, 0.225),
            }
            reps = common.repeats_for(4 * size, quick) * 2
            copies = []
            for op, fn in ops.items():
                times = {name: [] for name, _ in variants}
                for r in range(reps):
                    for name, setup in (variants if r % 2 == 0 else variants[::-1]):
                        setup()
                        times[name].append(_time(fn, 1))
                    copies.append(_time(lambda: np.copyto(w, b), 1))
                for name, ts in times.items():
                    t = common.median(ts)
                    rows.append({"op": op, "size": size, "variant": name, "seconds": t,
                                 "gbps": MIN_BYTES[op] * size / t / 1e9})
            t = common.median(copies)
            rows.append({"op": "copy", "size": size, "variant": "numpy", "seconds": t,
                         "gbps": MIN_BYTES["copy"] * size / t / 1e9})
    finally:
        settings.set("PSGD_ACCEL", saved[0])
        kernels.BLOCK = saved[1]
        if saved[2] is not None:
            kernels.numexpr.set_num_threads(saved[2])
    return {"rows": rows, "variants": [v for v, _ in variants], "block": kernels.BLOCK}


def run(quick=False):
    sizes = [10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7] + ([] if quick else [10 ** 8])
    data = measure(sizes, quick)
    common.save_json("accel.json", data)
    return report(data, sizes)


def rerender():
    data = common.load_json("accel.json")
    return report(data, sorted({r["size"] for r in data["rows"]}))


def report(data, sizes):
    rows = data["rows"]
    variants = data["variants"]
    by = {(r["op"], r["size"], r["variant"]): r for r in rows}
    md = ["One process, no MPI; median time of one call (and GB/s over the bytes the "
          "update must move at least once). `blocked` is the default host path "
          "(kernels.BLOCK = %d elements per block); `whole arrays` the same NumPy ops over "
          "whole buffers; numexpr runs with PSGD_ACCEL=numexpr. `fastest` compares "
          "with the default." % data["block"], ""]
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
            default_t = by[(op, size, variants[0])]["seconds"]
            cells.append("%s (%.2fx)" % (best[0], default_t / best[1]))
            wins.append((size, best[0], [by[(op, size, v)]["seconds"] / default_t
                                         for v in variants if v.startswith("numexpr")]))
            table_rows.append(cells)
        md.append("**%s** (`kernels.%s`)" % (op, "bmuf_update" if op == "bmuf" else "lerp"))
        md.append("")
        md.append(common.table(["elements"] + variants + ["np.copyto", "fastest"], table_rows))
        md.append("")
        others = [(s, v) for s, v, _ in wins if v != variants[0]]
        slower = [x for _, _, xs in wins for x in xs]
        heads.append("%s update: the default blocked NumPy path is fastest at %s; numexpr "
                     "takes %.1f-%.1fx its time" % (
                         op, "every size measured" if not others else "all sizes but " +
                         ", ".join("%s (%s)" % (common.fmt_size(s), v) for s, v in others),
                         min(slower) if slower else float("nan"),
                         max(slower) if slower else float("nan")))
    return common.Section("numexpr against NumPy for the sync updates", "\n".join(md), heads, data)


if __name__ == "__main__":
    common.script_main(run)
