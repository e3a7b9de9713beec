"""Convergence: test accuracy on MNIST-1D (default CNN) against samples
processed and wall time, every algorithm at 4 workers next to 1-worker
training with the same local optimizer (Adam, the trainer's defaults).

Each run is the trainer CLI itself:
    mpirun -np 4 python -m psgd.worker --algo ALGO --epochs E --metrics M.jsonl
(np 5 for the server algorithms: rank 0 serves 4 workers). The 1-worker
reference is `--algo bsp` on one rank, where a sync changes nothing. All runs
see the same 4000 training samples per epoch, so the accuracy at an equal
sample budget is read off the same epoch; the headline per algorithm is its
gap to the 1-worker run at the final budget.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ALGOS = ("bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd")
SERVER = ("easgd", "asgd", "masgd")
WORKERS = 4


def train(algo, np_, epochs, tag):
    path = common.result_path("convergence_%s.jsonl" % tag)
    common.mpi_run(np_, ["psgd.worker", "--algo", algo, "--epochs", epochs, "--metrics", path,
                         "--progress", "off", "--quiet"], module=True, timeout=600, pin_blas=True)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(quick=False):
    epochs = 3 if quick else 20
    algos = ("bsp", "easgd") if quick else ALGOS
    common.results_dir()
    runs = {"1 worker": {"algo": "bsp", "workers": 1, "rows": train("bsp", 1, epochs, "1worker")}}
    errors = {}
    for algo in algos:
        np_ = WORKERS + 1 if algo in SERVER else WORKERS
        try:
            runs[algo] = {"algo": algo, "workers": WORKERS, "rows": train(algo, np_, epochs, algo)}
        except RuntimeError as exc:       # one broken algorithm must not hide the others
            errors[algo] = common.error_line(exc)
    data = {"epochs": epochs, "runs": runs, "errors": errors}
    common.save_json("convergence.json", data)
    return report(data)


def rerender():
    return report(common.load_json("convergence.json"))


def _at(rows, key, budget):
    xs = [r["samples"] for r in rows]
    ys = [r[key] if r[key] is not None else float("nan") for r in rows]
    if not xs or budget > xs[-1] * 1.0001:
        return float("nan")
    return float(np.interp(budget, xs, ys))


def report(data):
    runs, epochs = data["runs"], data["epochs"]
    ref = runs["1 worker"]["rows"]
    per_epoch = ref[0]["samples"]
    picks = sorted({1, max(1, epochs // 4), max(1, epochs // 2), epochs})
    budgets = [per_epoch * e for e in picks]
    headers = ["run"] + ["acc @ %dk" % (b // 1000) for b in budgets] + \
        ["gap @ %dk" % (budgets[-1] // 1000), "wall @ %dk" % (budgets[-1] // 1000),
         "syncs @ %dk" % (budgets[-1] // 1000), "best acc"]
    rows, heads = [], []
    final_ref = _at(ref, "test_accuracy", budgets[-1])
    order = ["1 worker"] + [a for a in ALGOS if a in runs]
    for name in order:
        run = runs[name]
        r = run["rows"]
        accs = [_at(r, "test_accuracy", b) for b in budgets]
        gap = accs[-1] - final_ref
        wall = _at(r, "wall_seconds", budgets[-1])
        best = max((x["test_accuracy"] or 0) for x in r) if r else float("nan")
        rows.append([name if name == "1 worker" else "%s (%d workers)" % (name, run["workers"])]
                    + ["%.1f%%" % (100 * a) for a in accs]
                    + ["-" if name == "1 worker" else "%+.1f pt" % (100 * gap),
                       "%.1f s" % wall, "%.0f" % _at(r, "syncs", budgets[-1]),
                       "%.1f%%" % (100 * best)])
        if name != "1 worker":
            heads.append("%s %+.1f pt" % (name, 100 * gap))
    md = ["Test accuracy (held-out 1000 samples) of the model each run reports per epoch "
          "(collective: w_g; server: the center), at equal numbers of training samples "
          "processed by all workers together. `gap` is the difference to the 1-worker run "
          "at the same budget, in percentage points; `wall` is the run's wall time to that "
          "budget (4 workers share %d cores: see the scaling section); `syncs` the "
          "synchronizations of a worker by then. %d epochs of %d samples, default CNN, "
          "Adam, minibatch 32; every run uses the trainer's defaults for its algorithm "
          "(`python -m psgd.worker --help`, psgd/train/options.py: a sync every 4 "
          "minibatches unless the trainer chooses otherwise for the algorithm)." % (
              os.cpu_count() or 1, epochs, per_epoch), "",
          common.table(headers, rows), ""]
    for algo, err in data.get("errors", {}).items():
        md.append("- %s did not run: `%s`" % (algo, err))
    if data.get("errors"):
        md.append("")
    _plot(runs)
    for what in ("samples", "wall"):
        md.append(common.image("accuracy vs %s" % what, "convergence_%s.png" % what))
    return common.Section("Convergence at 4 workers", "\n".join(md),
                          ["accuracy gap to 1 worker at %dk samples: %s" % (
                              budgets[-1] // 1000, ", ".join(heads))], data)


def _plot(runs):
    plt = common.pyplot()
    if plt is None:
        return
    for what, key, label in (("samples", "samples", "training samples processed (all workers)"),
                             ("wall", "wall_seconds", "wall time (s)")):
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for name in ["1 worker"] + [a for a in ALGOS if a in runs]:
            r = runs[name]["rows"]
            ax.plot([x[key] for x in r], [100 * (x["test_accuracy"] or 0) for x in r],
                    marker=".", label=name, linewidth=2.5 if name == "1 worker" else 1.2,
                    color="black" if name == "1 worker" else None)
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(common.result_path("convergence_%s.png" % what), dpi=90)
        plt.close(fig)


if __name__ == "__main__":
    common.script_main(run)
