"""Sync overhead against raw MPI.

For each parameter count and each collective algorithm, one `synchronize`
is timed against a bare mpi4py `Allreduce(IN_PLACE)` of the same bytes in the
same job, the two interleaved (alternating which goes first) so machine noise
hits both alike; each figure is median(sync) / median(Allreduce). A
measurement is the slowest rank's time after a barrier.

"kaldi" is the reference's way (BspWorker::Synchronize): a counts Allreduce,
then per tensor scale, copy to a host staging array, Allreduce, copy back,
on a 20-tensor model of the same size; psgd's flat buffer does the same sum
in one call with no copies.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import mpi_regimes  # noqa: E402

ALGOS = ("bsp", "bmuf", "sod", "syncgrad")
PIPELINED = ALGOS   # their update (syncgrad: the count's fold and unfold) runs under the chunks
TENSORS = 20
TARGET = 1.05
# The network regime's ranks share one host, so psgd would pick its one-host
# pipeline threshold; a job across machines gets this one (psgd/pipeline.py).
ACROSS_HOSTS_ENV = {"PSGD_MPI_PIPELINE_THRESHOLD": "0"}


def _shapes(size):
    """20 tensors summing to `size` (uneven, like a network's layers)."""
    weights = np.arange(1, TENSORS + 1, dtype=np.float64)
    sizes = np.floor(weights / weights.sum() * size).astype(np.int64)
    sizes[-1] += size - sizes.sum()
    return [(int(s),) for s in sizes]


def _model(size, rank):
    from psgd.buffers import FlatBuffer
    buf = FlatBuffer.allocate(_shapes(size), np.float32)
    buf.data.fill(1.0 + 0.01 * rank)
    return buf


class Kaldi:
    """BspWorker::Synchronize on the host: per-tensor scale, stage, Allreduce, copy back."""

    def __init__(self, comm, size):
        self.comm = comm
        self.params = [np.full(s, 1.0 + 0.01 * comm.rank, dtype=np.float32) for s in _shapes(size)]
        self.staging = [np.empty_like(p) for p in self.params]
        self.count = np.zeros(1, dtype=np.int64)

    def synchronize(self, n_k):
        from mpi4py import MPI
        self.count[0] = n_k
        self.comm.Allreduce(MPI.IN_PLACE, self.count, op=MPI.SUM)
        factor = np.float32(n_k / self.count[0])
        for p, s in zip(self.params, self.staging):
            p *= factor
            s[...] = p
            self.comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
            p[...] = s
        return True

    def close(self):
        pass


class _NoExchange:
    """Stands in for an algorithm's MPI exchange to time its arithmetic alone
    (over the whole buffer, as after one Allreduce)."""
    direct = False      # pipeline.allreduce asks: a host buffer

    def __init__(self, buffer):
        self.buffer = buffer

    def spans_hosts(self):
        return False

    def allreduce(self, before=None, after=None):
        for fn in (before, after):
            if fn is not None:
                fn(0, self.buffer.size)


def _update_alone(obj, n_k, n, size):
    """The algorithm's update (weighting and elementwise math) without its
    MPI calls: what one sync would cost on top of a free Allreduce."""
    names = [k for k in ("exchange", "grad_exchange") if hasattr(obj, k)]
    saved = [getattr(obj, k) for k in names]
    from psgd import settings
    for k in names:
        setattr(obj, k, _NoExchange(getattr(obj, k).buffer))
    old = settings.set("PSGD_MPI_PIPELINE_THRESHOLD", 2 ** 62)   # one call: no chunks
    try:
        if getattr(obj, "needs_grads", False):     # syncgrad: its fold and unfold around the sum
            obj.reduce(n_k)
        else:
            obj.update(n_k, n, size)
    finally:
        settings.set("PSGD_MPI_PIPELINE_THRESHOLD", old)
        for k, v in zip(names, saved):
            setattr(obj, k, v)


def _make(method, comm, size):
    import psgd
    if method == "kaldi":
        return Kaldi(comm, size)
    params = _model(size, comm.rank).views
    if method == "syncgrad":
        grads = _model(size, comm.rank).views
        return psgd.create("syncgrad", params, comm=comm, grads=grads)
    return psgd.create(method, params, comm=comm)


def child(argv):
    from mpi4py import MPI
    from psgd import mpi, pipeline, settings
    p = common.child_args()
    p.add_argument("--sizes", required=True)
    p.add_argument("--methods", default=",".join(ALGOS + ("kaldi",)))
    p.add_argument("--max-reps", type=int, default=None,
                   help="at most this many repeats (a slow link's large sizes)")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    across = mpi.spans_hosts(comm)     # the pipeline threshold depends on it
    rows = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        raw = np.empty(size, dtype=np.float32)
        raw.fill(0.0)          # zeros stay zeros under a sum: no overflow over the repeats

        def bare():
            comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)

        reps = common.repeats_for(raw.nbytes, args.quick)
        reps = min(reps, args.max_reps or reps)
        for method in args.methods.split(","):
            obj = _make(method, comm, size)
            n_k = 32 + comm.rank   # uneven counts: the weighted path, as in training

            n_total = sum(32 + r for r in range(comm.size))

            def sync():
                obj.synchronize(n_k)

            def alone():
                _update_alone(obj, n_k, n_total, comm.size)

            def one_call():
                """The same sync with its exchange unpipelined (one Allreduce)."""
                old = settings.set("PSGD_MPI_PIPELINE_THRESHOLD", 2 ** 62)
                try:
                    obj.synchronize(n_k)
                finally:
                    settings.set("PSGD_MPI_PIPELINE_THRESHOLD", old)

            fns = [("raw", bare), ("sync", sync)]
            if method != "kaldi":
                fns.append(("alone", alone))
            if method in PIPELINED and pipeline.pipelined(size, across):
                fns.append(("one", one_call))
            for _ in range(1 if raw.nbytes >= 2e8 else 2):   # first touches, MPI set-up
                for _, fn in fns:
                    fn()
            times = {k: [] for k, _ in fns}
            for r in range(reps):
                for k, fn in (fns if r % 2 == 0 else fns[::-1]):
                    times[k].append(common.timed_collective(comm, fn))
            med = {k: common.median(v) for k, v in times.items()}
            rows.append({"size": size, "method": method, "raw": times["raw"],
                         "sync": times["sync"], "alone": times.get("alone"),
                         "raw_median": med["raw"], "sync_median": med["sync"],
                         "alone_median": med.get("alone"),
                         "ratio": med["sync"] / med["raw"],
                         "one_call_ratio": med["one"] / med["raw"] if "one" in med else None,
                         "floor": (med["raw"] + med["alone"]) / med["raw"]
                         if "alone" in med else None})
            obj.close()
            obj = None            # free this method's buffers before the next one's
        raw = None
    if comm.rank == 0:
        import json
        with open(args.out, "w") as f:
            json.dump({"np": comm.size, "accel": settings.get("PSGD_ACCEL"),
                       "pipeline_chunk": pipeline.pipeline_chunk(across), "across_hosts": across,
                       "pipeline_threshold": pipeline.pipeline_threshold(across),
                       "rows": rows}, f)


# driver ---------------------------------------------------------------------------
def run(quick=False, nps=(2, 4), regime="both"):
    sizes = [10 ** 5, 10 ** 6, 10 ** 7] if quick else [10 ** 5, 10 ** 6, 10 ** 7, 10 ** 8]
    runs = []
    for reg in mpi_regimes.regimes(regime):
        for np_ in nps:
            numexpr = not quick and np_ == nps[0] and reg == "shm"
            for accel in ("auto", "numexpr") if numexpr else ("auto",):
                # Of these algorithms only bmuf's update has a numexpr form.
                methods = ",".join(ALGOS + ("kaldi",)) if accel == "auto" else "bmuf"
                out = common.result_path("sync_overhead_np%d_%s_%s.json" % (np_, accel, reg))
                common.results_dir()
                env = {"PSGD_ACCEL": accel}
                if reg == "network":
                    env.update(ACROSS_HOSTS_ENV)
                runs.append(mpi_regimes.run_in_regime(
                    "sync_overhead.py", np_, out, reg,
                    ["--sizes", ",".join(map(str, sizes)), "--methods", methods]
                    + (["--quick"] if quick else []), env=env, timeout=1800))
    common.save_json("sync_overhead.json", runs)
    return report(runs, sizes)


def rerender():
    runs = common.load_json("sync_overhead.json")
    return report(runs, sorted({r["size"] for run in runs for r in run["rows"]}))


def _regime(run):
    return run.get("regime", "shm")     # results from before the regimes were measured


def _ordered(auto):
    """Runs by np, each np's regimes side by side (shm first)."""
    return sorted(auto, key=lambda r: (r["np"], mpi_regimes.REGIMES.index(_regime(r))))


def report(runs, sizes):
    auto = _ordered([r for r in runs if r["accel"] == "auto"])
    numexpr_runs = {r["np"]: r for r in runs if r["accel"] == "numexpr"}
    methods = list(ALGOS) + ["kaldi"]
    headers = ["np", "parameters", "bytes", "regime", "Allreduce"] + methods
    rows, worst = [], {}
    for np_ in sorted({r["np"] for r in auto}):
        for size in sizes:
            for run in (r for r in auto if r["np"] == np_):
                by = {(r["size"], r["method"]): r for r in run["rows"]}
                raw = [by[(size, m)]["raw_median"] for m in methods if (size, m) in by]
                if not raw:
                    continue
                cells = [np_, common.fmt_size(size), common.fmt_bytes(4 * size), _regime(run),
                         common.fmt_time(common.median(raw))]
                for m in methods:
                    r = by.get((size, m))
                    if r is None:
                        cells.append("-")
                        continue
                    mark = "" if m == "kaldi" or size < 10 ** 6 or r["ratio"] <= TARGET else " (!)"
                    floor = "" if r.get("floor") is None else " (%.2f)" % r["floor"]
                    cells.append("%.3fx%s%s" % (r["ratio"], floor, mark))
                    key = (m, _regime(run))
                    if m != "kaldi" and size >= 10 ** 6 and r["ratio"] > worst.get(key, (0,))[0]:
                        worst[key] = (r["ratio"], r["floor"], np_, size)
                rows.append(cells)
    md = ["Median time of one `synchronize` divided by the median time of a bare "
          "`Allreduce(IN_PLACE)` of the same bytes, measured interleaved in the same job "
          "(slowest rank after a barrier). The Allreduce column is that baseline's median. "
          "`kaldi` is the reference's per-tensor way (scale, stage, Allreduce, copy back "
          "for each of %d tensors) on the same bytes. In brackets, the floor: (Allreduce + "
          "the algorithm's update timed alone, without its MPI calls) / Allreduce, i.e. what "
          "the sync would cost with no plumbing at all if nothing overlapped; the gap between "
          "the floor and 1 is the update's arithmetic, which a pipelined exchange can hide "
          "(a ratio below its floor). (!) marks a ratio above the %.2fx target "
          "at 1e6 parameters and up. %s" % (TENSORS, TARGET, common.BIND_NOTE), "",
          mpi_regimes.REGIME_NOTE, "",
          common.table(headers, rows), ""]
    md += _pipeline_table(auto, sizes)
    if numexpr_runs:
        md += _numexpr_table(auto, numexpr_runs, sizes)
    _plot(auto, sizes)
    md.append(common.image("sync overhead", "sync_overhead.png"))
    heads = ["sync / bare Allreduce, worst case at >= 1e6 parameters (its floor in "
             "brackets), %s: " % reg + ", ".join("%s %.2fx (%.2f) at np %d, %s" % (
                 m, worst[m, reg][0], worst[m, reg][1], worst[m, reg][2],
                 common.fmt_size(worst[m, reg][3])) for m in ALGOS if (m, reg) in worst)
             for reg in mpi_regimes.REGIMES if any(k[1] == reg for k in worst)]
    return common.Section("Synchronization overhead against raw MPI", "\n".join(md), heads, runs)


def _pipeline_table(auto, sizes):
    """The syncs with the exchange in one Allreduce and pipelined, same job."""
    rows = []
    for run in auto:
        by = {(r["size"], r["method"]): r for r in run["rows"]}
        for size in sizes:
            pairs = [by.get((size, m)) for m in PIPELINED]
            if not any(r and r.get("one_call_ratio") for r in pairs):
                continue
            cells = [run["np"], common.fmt_size(size), _regime(run)]
            for r in pairs:
                cells += ["-", "-"] if not r or r.get("one_call_ratio") is None else [
                    "%.3fx" % r["one_call_ratio"], "%.3fx" % r["ratio"]]
            rows.append(cells)
    if not rows:
        return []
    chunk = auto[0].get("pipeline_chunk")
    thresholds = "; ".join("%s: from %s elements up" % (
        reg, "{:,}".format(min(r.get("pipeline_threshold", 0) for r in auto
                               if _regime(r) == reg)))
        for reg in mpi_regimes.REGIMES if any(_regime(r) == reg for r in auto))
    headers = ["np", "parameters", "regime"] + ["%s %s" % (m, k) for m in PIPELINED
                                                for k in ("one call", "pipelined")]
    return ["The exchange pipelined: `one call` is the sync with its sum in one Allreduce and "
            "the update after it; `pipelined` runs it in chunks of %s elements (Iallreduce, "
            "the update of a chunk under the sum of the next; psgd/pipeline.py). psgd "
            "pipelines a buffer of more than one chunk when its ranks span hosts, and from "
            "4,194,304 elements up when they share one; the network regime's ranks share "
            "this machine, so it runs with the threshold of a job across hosts (`%s`). "
            "Thresholds in this run: %s. Both against the same job's bare Allreduce, "
            "interleaved:" % ("{:,}".format(chunk or 0),
                              " ".join("%s=%s" % kv for kv in ACROSS_HOSTS_ENV.items()),
                              thresholds), "", common.table(headers, rows), ""]


def _numexpr_table(auto, numexpr_runs, sizes):
    md = ["bmuf again with `PSGD_ACCEL=numexpr` (numexpr instead of the default "
          "blocked NumPy for its update), in a job of its own right after the default one; "
          "each ratio is against its own job's Allreduce:", ""]
    nrows = []
    for np_, run in sorted(numexpr_runs.items()):
        by = {(r["size"], r["method"]): r for r in run["rows"]}
        auto_by = {(r["size"], r["method"]): r for a in auto
                   if a["np"] == np_ and _regime(a) == _regime(run) for r in a["rows"]}
        for size in sizes:
            a, n = auto_by.get((size, "bmuf")), by.get((size, "bmuf"))
            nrows.append([np_, common.fmt_size(size), "%.3fx" % a["ratio"] if a else "-",
                          "%.3fx" % n["ratio"] if n else "-"])
    md.append(common.table(["np", "parameters", "bmuf (default)", "bmuf (numexpr)"], nrows))
    md.append("")
    return md


def _plot(auto, sizes):
    plt = common.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(auto), figsize=(5.5 * len(auto), 4), squeeze=False)
    for ax, run in zip(axes[0], auto):
        by = {(r["size"], r["method"]): r for r in run["rows"]}
        for m in list(ALGOS) + ["kaldi"]:
            xs = [s for s in sizes if (s, m) in by]
            ax.plot(xs, [by[(s, m)]["ratio"] for s in xs], marker="o", label=m)
        ax.axhline(TARGET, color="grey", linestyle="--", linewidth=1, label="target %.2fx" % TARGET)
        ax.set_xscale("log")
        ax.set_xlabel("float32 parameters")
        ax.set_ylabel("sync time / bare Allreduce time")
        ax.set_title("np %d, %s" % (run["np"], _regime(run)))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(common.result_path("sync_overhead.png"), dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    common.script_main(run, child, mpi_regimes.add_regime_arg)
