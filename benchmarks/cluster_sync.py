"""Sync across hosts against the link floor (cluster regime).

The child of sync_overhead.py (one `synchronize` of bsp, bmuf, sod and
syncgrad interleaved with a bare Allreduce of the same bytes, the slowest
rank after a barrier) run on namespace hosts: 2 hosts x 1 rank and 2 hosts x
2 ranks, at 1 Gb/s and 10 Gb/s per host link. Each time is shown against
the link floor (benchmarks/cluster.py: the bytes a bandwidth-optimal
hierarchical allreduce must send over each host's link, divided by its
rate), which is computed, not measured; the sync and the bare Allreduce are
measured interleaved in one job, so load hits them alike.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
import common  # noqa: E402

ALGOS = ("bsp", "bmuf", "sod", "syncgrad")
PIPELINED = ALGOS
TARGET = 1.10
TITLE = "Across hosts: sync against the link floor"


def _max_reps(size):
    return 3 if size >= 10 ** 8 else 7


def run(quick=False):
    why = cluster.why_not()
    if why:
        return cluster.skipped(TITLE, why)
    sizes = [10 ** 5, 10 ** 6] if quick else [10 ** 5, 10 ** 6, 10 ** 7, 10 ** 8]
    rates = cluster.RATES[:1] if quick else cluster.RATES
    runs = measure(rates, cluster.LAYOUTS, sizes, ALGOS, quick=quick)
    common.save_json("cluster_sync.json", {"runs": runs, "quick": quick})
    return report(runs)


def measure(rates, layouts, sizes, methods, quick=False, max_reps=None):
    """One job per (rate, layout, size): its repeats depend on the size."""
    runs = []
    for rate in rates:
        with cluster.hosts(2, rate):
            for count, per_host in layouts:
                for size in sizes:
                    out = common.result_path("cluster_sync_child.json")
                    load = common.load_average()[0]
                    data = cluster.run_child(
                        "sync_overhead.py", cluster.layout(count, per_host), out,
                        ["--sizes", size, "--methods", ",".join(methods),
                         "--max-reps", max_reps or _max_reps(size)]
                        + (["--quick"] if quick else []),
                        timeout=1200, env={"PSGD_ACCEL": "auto"})
                    data.update(rate=rate, hosts=count, per_host=per_host,
                                load=[load, common.load_average()[0]])
                    runs.append(data)
                    print("   %s %dx%d %s done" % (rate, count, per_host,
                                                   common.fmt_size(size)), flush=True)
    return runs


def spot(argv):
    """A few shapes of the section, e.g. one algorithm's change re-measured:
    --rates 1gbit --layouts 2x2 --sizes 1e7 --methods bsp,syncgrad. Prints
    the section's tables; saves results/cluster_sync_spot.json, not the
    section's results."""
    import argparse
    p = argparse.ArgumentParser(prog="cluster_sync.py --spot")
    p.add_argument("--rates", default=",".join(cluster.RATES))
    p.add_argument("--layouts", default=",".join("%dx%d" % hl for hl in cluster.LAYOUTS))
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--methods", default=",".join(ALGOS))
    p.add_argument("--max-reps", type=int, default=None)
    args = p.parse_args(argv)
    why = cluster.why_not()
    if why:
        sys.exit("cluster_sync.py --spot: %s" % why)
    runs = measure(args.rates.split(","),
                   [tuple(int(x) for x in hl.split("x")) for hl in args.layouts.split(",")],
                   [int(float(x)) for x in args.sizes.split(",")], args.methods.split(","),
                   max_reps=args.max_reps)
    common.save_json("cluster_sync_spot.json", {"runs": runs, "argv": argv})
    print(report(runs).markdown)


def rerender():
    return report(common.load_json("cluster_sync.json")["runs"])


def _cell(times, floor):
    """median / floor, with the range of the repeats in brackets."""
    return "%.2fx (%.2f-%.2f)" % (common.median(times) / floor, min(times) / floor,
                                  max(times) / floor)


def report(runs):
    headers = ["rate", "hosts x ranks", "parameters", "floor", "Allreduce"] + list(ALGOS) + [
        "load"]
    rows, worst = [], {}
    for r in runs:
        by = {row["method"]: row for row in r["rows"]}
        size = r["rows"][0]["size"]
        floor = cluster.link_floor(4 * size, r["hosts"], r["rate"])
        raw = [t for row in r["rows"] for t in row["raw"]]
        cells = [r["rate"], "%d x %d" % (r["hosts"], r["per_host"]), common.fmt_size(size),
                 common.fmt_time(floor), _cell(raw, floor)]
        for m in ALGOS:
            row = by.get(m)
            if row is None:
                cells.append("-")
                continue
            ratio = row["sync_median"] / floor
            mark = " (!)" if size >= 10 ** 6 and ratio > TARGET else ""
            cells.append(_cell(row["sync"], floor) + mark)
            key = (m, r["rate"])
            if size >= 10 ** 6 and ratio > worst.get(key, (0,))[0]:
                worst[key] = (ratio, r["hosts"], r["per_host"], size)
        cells.append("%.1f-%.1f" % tuple(r["load"]))
        rows.append(cells)
    md = ["One `synchronize` across hosts, and a bare `Allreduce(IN_PLACE)` of the same "
          "bytes measured interleaved with it in the same job (the slowest rank after a "
          "barrier; the child of `sync_overhead.py`), each as its median over the repeats "
          "divided by the link floor: 2 (H-1)/H x the buffer's bytes over one host's link "
          "rate, what a bandwidth-optimal hierarchical allreduce must send over each host's "
          "link (computed, not measured; it is the same with 1 or 2 ranks per host). In "
          "brackets the fastest and slowest repeat against the same floor. (!) marks a sync "
          "above the %.2fx goal from 1e6 parameters up. `load`: the machine's 1-minute load "
          "average before and after the job (2 cores, shared with other work)." % TARGET, "",
          cluster.NOTE, "", common.table(headers, rows), ""]
    md += _pipeline_table(runs)
    heads = ["%s across 2 hosts at %s: worst sync / link floor from 1e6 up: " % (
        "sync", rate) + ", ".join("%s %.2fx (%d x %d, %s)" % (
            m, worst[m, rate][0], worst[m, rate][1], worst[m, rate][2],
            common.fmt_size(worst[m, rate][3])) for m in ALGOS if (m, rate) in worst)
        for rate in cluster.RATES if any(k[1] == rate for k in worst)]
    return common.Section(TITLE, "\n".join(md), heads, runs)


def _pipeline_table(runs):
    """The syncs in one Allreduce against pipelined, same job, both
    against the floor (one call's time is its ratio to the job's Allreduce)."""
    rows = []
    for r in runs:
        by = {row["method"]: row for row in r["rows"]}
        size = r["rows"][0]["size"]
        floor = cluster.link_floor(4 * size, r["hosts"], r["rate"])
        cells = []
        for m in PIPELINED:
            row = by.get(m)
            if row is None or row.get("one_call_ratio") is None:
                cells += ["-", "-"]
                continue
            cells += ["%.2fx" % (row["one_call_ratio"] * row["raw_median"] / floor),
                      "%.2fx" % (row["sync_median"] / floor)]
        if any(c != "-" for c in cells):
            rows.append([r["rate"], "%d x %d" % (r["hosts"], r["per_host"]),
                         common.fmt_size(size)] + cells)
    if not rows:
        return []
    return ["The same syncs with their exchange in one Allreduce (`one call`) and in "
            "pipelined chunks (what psgd does across hosts), interleaved in the same job, "
            "each against the link floor:", "",
            common.table(["rate", "hosts x ranks", "parameters"] + [
                "%s %s" % (m, k) for m in PIPELINED for k in ("one call", "pipelined")],
                rows), ""]


if __name__ == "__main__":
    if "--spot" in sys.argv:
        spot([a for a in sys.argv[1:] if a != "--spot"])
    else:
        common.script_main(run)
