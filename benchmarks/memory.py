"""Memory: peak resident memory per rank for a 1e8-parameter float32 model
(400 MB), per algorithm, in units of the model's size, against the buffers
the math needs.

Each rank imports everything and initializes MPI, records its resident size,
resets its peak (Linux /proc/self/clear_refs), then builds the model as
views of one flat buffer (as the trainer's network does, so psgd adopts it
without a copy), creates the algorithm, runs 3 syncs and stops. The figure is
(peak - resident size before the model) / model bytes. Collective algorithms
run on 2 ranks, server algorithms on 3 (a server and 2 workers, so masgd's
per-worker momentum shows). The `MPI alone` rows are the same probe around a
bare Allreduce / Sendrecv of a model-sized buffer: MPI's own scratch.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

COLLECTIVE = ("bsp", "bmuf", "sod", "syncgrad")
SERVER = ("easgd", "asgd", "masgd")
# Model-sized buffers per rank that the math of docs/algorithms.md needs (default
# options), and what each holds. masgd's server: x, the received delta and
# one v per worker (scope = worker), here N = 2.
REQUIRED = {
    "allreduce": (1, "the buffer"), "sendrecv": (2, "send and receive buffers"),
    "bsp": (1, "w"), "bmuf": (3, "w, w_g, D"), "sod": (3, "w, w_g, v (nesterov)"),
    "syncgrad": (2, "w, g"),
    "easgd worker": (2, "w, x received"), "easgd server": (2, "x, w_k received"),
    "asgd worker": (2, "w, w_prev (the delta can be formed in w)"),
    "asgd server": (2, "x, delta received"),
    "masgd worker": (2, "w, w_prev"), "masgd server": (4, "x, delta, v per worker (2)"),
}


def _flat_model(size, rank, tensors=20):
    from psgd.buffers import FlatBuffer
    shapes = [(size // tensors,)] * (tensors - 1) + [(size - (tensors - 1) * (size // tensors),)]
    buf = FlatBuffer.allocate(shapes, np.float32)
    buf.data.fill(1.0 + 0.01 * rank)
    return buf.views


def child(argv):
    import gc
    from mpi4py import MPI
    import psgd
    p = common.child_args()
    p.add_argument("--what", required=True)
    p.add_argument("--size", type=float, default=1e8)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    size = int(args.size)
    comm.Barrier()
    gc.collect()
    before = common.rss_bytes()
    reset = common.reset_peak_rss()
    if args.what == "allreduce":
        buf = np.full(size, 1.0, np.float32)
        for _ in range(3):
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    elif args.what == "sendrecv":
        buf = np.full(size, 1.0, np.float32)
        other = np.empty_like(buf)
        if comm.rank < 2:
            for _ in range(3):
                comm.Sendrecv(buf, dest=1 - comm.rank, recvbuf=other, source=1 - comm.rank)
    else:
        params = _flat_model(size, comm.rank)
        grads = _flat_model(size, comm.rank) if args.what == "syncgrad" else None
        obj = psgd.create(args.what, params, comm=comm, grads=grads)
        del params, grads
        if obj.role == "server":
            obj.run()
        else:
            for _ in range(3):
                obj.synchronize(32)
            obj.stop(0)
    peak = common.peak_rss_bytes()
    mine = {"rank": comm.rank, "before": before, "peak": peak, "peak_reset": reset,
            "extra": peak - before}
    ranks = comm.gather(mine, root=0)
    if comm.rank == 0:
        import json
        with open(args.out, "w") as f:
            json.dump({"what": args.what, "np": comm.size, "size": size, "nbytes": 4 * size,
                       "ranks": ranks}, f)


def run(quick=False):
    size = 10 ** 7 if quick else 10 ** 8
    common.results_dir()
    jobs = [("allreduce", 2), ("sendrecv", 2)] + [(a, 2) for a in COLLECTIVE] + \
        [(a, 3) for a in SERVER]
    results, errors = [], {}
    for what, np_ in jobs:
        out = common.result_path("memory_%s.json" % what)
        try:
            results.append(common.run_child("memory.py", np_, out,
                                            ["--what", what, "--size", size], timeout=900))
        except RuntimeError as exc:
            errors[what] = common.error_line(exc)
    data = {"size": size, "results": results, "errors": errors}
    common.save_json("memory.json", data)
    return report(data)


def rerender():
    return report(common.load_json("memory.json"))


def report(data):
    rows, heads = [], []
    mpi_extra = {}
    for r in data["results"]:
        model = r["nbytes"]
        groups = {}
        for x in r["ranks"]:
            role = r["what"]
            if r["what"] in SERVER:
                role = "%s %s" % (r["what"], "server" if x["rank"] == 0 else "worker")
            elif r["what"] == "sendrecv" and x["rank"] >= 2:
                continue
            groups.setdefault(role, []).append(x["extra"] / model)
        for role, vals in groups.items():
            need, what = REQUIRED.get(role, (float("nan"), "?"))
            measured = max(vals)
            if r["what"] in ("allreduce", "sendrecv"):
                mpi_extra[r["what"]] = measured - need
            rows.append([("MPI alone: " if r["what"] in ("allreduce", "sendrecv") else "") + role,
                         r["np"], "%.2f" % measured, need, what, "%+.2f" % (measured - need)])
            if r["what"] not in ("allreduce", "sendrecv"):
                heads.append("%s %.2fx (math %d)" % (role, measured, need))
    size = data["size"]
    md = ["Peak resident memory per rank added by the model and the algorithm, divided by "
          "the model's size (%s float32 parameters = %s), the worst rank of each role. "
          "`math` is the number of model-sized buffers the update of docs/algorithms.md needs on "
          "that rank; `excess` = measured - math, which includes MPI's own scratch (the "
          "`MPI alone` rows: a bare Allreduce / Sendrecv of the same buffer) and NumPy "
          "temporaries." % (common.fmt_size(size), common.fmt_bytes(4 * size)), "",
          common.table(["rank role", "ranks", "measured (x model)", "math (x model)",
                        "the math's buffers", "excess"], rows), ""]
    for what, err in data.get("errors", {}).items():
        md.append("- %s did not run: `%s`" % (what, err))
    return common.Section("Memory per rank", "\n".join(md),
                          ["peak memory per rank in model sizes: " + ", ".join(heads)], data)


if __name__ == "__main__":
    common.script_main(run, child)
