"""Throughput and scaling: samples per second per algorithm at 1, 2 and 4
workers, with each worker's time split into compute, communication and
waiting.

Each run is the trainer's own epoch loop (its parallel strategy's
train_epoch, psgd/train/data_parallel.py) on MNIST-1D with a widened CNN
(so compute dominates a sync), over a fixed training set split across the
workers (strong scaling). The wrappers below
only read the clock around the trainer's calls:
- compute: the network's forward/backward and the optimizer step;
- waiting (collective algorithms): the counts Allreduce that opens every
  synchronize, where a rank waits for the slowest rank to arrive;
- communication: the rest of synchronize (the model Allreduce and the update);
- server algorithms (rank 0 serves, so N workers take N + 1 ranks): a
  worker's sync is split into the bare round trip of the model bytes
  (Sendrecv with the idle server, measured in the same job before training)
  times the syncs, and waiting (the rest: queueing behind other workers and
  the server's updates).
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ALGOS = ("bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd")
WORKERS = (1, 2, 4)
MODEL = {"channels": "64,64,64", "hidden": "512"}


class Clock:
    """Accumulates the seconds spent inside a wrapped callable."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
        return timed


def _bare_roundtrip(comm, nbytes, reps=5):
    """Median bare Sendrecv of the model's bytes between rank 0 and rank 1."""
    buf = np.zeros(nbytes // 4, dtype=np.float32)
    scratch = np.empty_like(buf)
    times = []
    for _ in range(reps + 1):
        comm.Barrier()
        if comm.rank in (0, 1):
            peer = 1 - comm.rank
            start = time.perf_counter()
            comm.Sendrecv(buf, dest=peer, sendtag=7, recvbuf=scratch, source=peer, recvtag=7)
            times.append(time.perf_counter() - start)
    t = common.median(times[1:]) if comm.rank == 1 else 0.0
    from mpi4py import MPI
    return comm.allreduce(t, op=MPI.MAX)


def child(argv):
    from mpi4py import MPI
    from psgd.train import Trainer, make_config
    from psgd.train.metrics import Progress
    p = common.child_args()
    p.add_argument("--algo", required=True)
    p.add_argument("--num-samples", type=int, required=True)
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    config = make_config(algo=args.algo, epochs=1, num_samples=args.num_samples,
                         progress="off", quiet=True, **MODEL)
    trainer = Trainer(config)
    trainer.setup()
    strategy = trainer.parallel
    net, sync = strategy.net, strategy.sync
    compute, comm_clock, wait = Clock(), Clock(), Clock()
    net.loss_and_grad = compute.wrap(net.loss_and_grad)
    strategy.optimizer.step = compute.wrap(strategy.optimizer.step)
    bare = 0.0
    if strategy.server_based:
        bare = _bare_roundtrip(comm, net.param_buffer.nbytes)
    if not strategy.is_server:
        sync.synchronize = comm_clock.wrap(sync.synchronize)
        if not strategy.server_based:
            sync.node.allreduce_counts = wait.wrap(sync.node.allreduce_counts)
    comm.Barrier()
    start = time.perf_counter()
    samples = 0
    if strategy.is_server:
        sync.run()
    else:
        samples = strategy.train_epoch(0, Progress("off", False), trainer.watchdog)[1]
    wall = time.perf_counter() - start
    trainer.watchdog.close()
    sync_s = comm_clock.seconds
    if strategy.server_based:
        transfer = min(sync_s, bare * comm_clock.calls)
        waiting = sync_s - transfer
    else:
        waiting = wait.seconds
        transfer = sync_s - waiting
    mine = {"rank": comm.rank, "server": strategy.is_server, "wall_s": wall,
            "samples": samples, "compute_s": compute.seconds, "comm_s": transfer,
            "wait_s": waiting, "syncs": comm_clock.calls,
            "other_s": wall - compute.seconds - sync_s}
    ranks = comm.gather(mine, root=0)
    if comm.rank == 0:
        import json
        workers = [r for r in ranks if not r["server"]]
        total = sum(r["samples"] for r in workers)
        wall = max(r["wall_s"] for r in ranks)
        with open(args.out, "w") as f:
            json.dump({"algo": args.algo, "np": comm.size, "workers": len(workers),
                       "params": int(net.num_params), "samples": total, "wall_s": wall,
                       "throughput": total / wall, "bare_roundtrip_s": bare,
                       "ranks": ranks}, f)


# driver ---------------------------------------------------------------------------
def run(quick=False):
    num_samples = 2500 if quick else 20000
    algos = ("bsp", "syncgrad", "easgd") if quick else ALGOS
    best, errors = {}, {}
    # Two rounds, the second in reverse order; each configuration keeps its
    # faster round. Other load on a shared machine only ever slows a run, so
    # the faster of two is the better estimate of what the code does.
    for rounds in range(1 if quick else 2):
        for algo in algos:
            server = algo in ("easgd", "asgd", "masgd")
            for n in (WORKERS if rounds == 0 else WORKERS[::-1]):
                out = common.result_path("scaling_%s_%d.json" % (algo, n))
                try:
                    r = common.run_child("scaling.py", n + 1 if server else n, out,
                                         ["--algo", algo, "--num-samples", num_samples],
                                         timeout=300, pin_blas=True)
                except RuntimeError as exc:   # one broken run must not hide the others
                    errors["%s at %d workers" % (algo, n)] = common.error_line(exc)
                    continue
                key = (algo, n)
                r["rounds"] = best.get(key, {}).get("rounds", []) + [r["throughput"]]
                if key not in best or r["throughput"] > best[key]["throughput"]:
                    best[key] = r
                else:
                    best[key]["rounds"] = r["rounds"]
    results = [best[k] for k in sorted(best, key=lambda k: (ALGOS.index(k[0]), k[1]))]
    common.save_json("scaling.json", {"results": results, "errors": errors})
    return report(results, errors)



def rerender():
    data = common.load_json("scaling.json")
    return report(data["results"], data["errors"])


def report(results, errors=None):
    cores = os.cpu_count() or 1
    by = {(r["algo"], r["workers"]): r for r in results}
    algos = [a for a in ALGOS if any(k[0] == a for k in by)]
    rows, heads = [], []
    for algo in algos:
        base = by.get((algo, 1))
        for n in WORKERS:
            r = by.get((algo, n))
            if r is None:
                continue
            workers = [x for x in r["ranks"] if not x["server"]]
            split = {k: np.mean([x[k] / x["wall_s"] for x in workers])
                     for k in ("compute_s", "comm_s", "wait_s", "other_s")}
            one = base["throughput"] if base else float("nan")
            eff = r["throughput"] / (n * one)
            core_eff = r["throughput"] / (min(n, cores) * one)
            rows.append([algo, n, r["np"], "%.0f" % r["throughput"],
                         "%.2fx" % (r["throughput"] / base["throughput"]) if base else "-",
                         "%.0f%%" % (100 * eff), "%.0f%%" % (100 * core_eff),
                         "%.0f%%" % (100 * split["compute_s"]), "%.0f%%" % (100 * split["comm_s"]),
                         "%.0f%%" % (100 * split["wait_s"]), "%.0f%%" % (100 * split["other_s"]),
                         r["ranks"][-1]["syncs"]])
        r2 = by.get((algo, min(2, cores)))
        if base and r2:
            heads.append("%s: %.2fx at %d workers" % (algo, r2["throughput"] / base["throughput"],
                                                      r2["workers"]))
    if not results:
        return common.Section("Throughput and scaling", "No run succeeded: " + "; ".join(
            "%s: `%s`" % kv for kv in (errors or {}).items()), ["scaling: failed"], None)
    any_r = results[0]
    md = ["The trainer's defaults for each algorithm (Adam, minibatch 32, a sync every 4 "
          "minibatches unless the trainer picks otherwise: see the syncs column) on "
          "MNIST-1D, CNN with channels %s and hidden %s "
          "(%d parameters), one epoch over %d training samples split across the workers. "
          "Throughput = all workers' samples / the slowest rank's wall time; each "
          "configuration ran twice (the second round in reverse order) and keeps its faster "
          "run, since other load only slows a run. Efficiency = "
          "throughput / (N x 1-worker throughput); `per core` divides by min(N, %d cores) "
          "instead. Time shares are of each worker's wall time, averaged over workers; "
          "`other` is data shuffling, loss bookkeeping and Python around the calls." % (
              MODEL["channels"], MODEL["hidden"], any_r["params"], any_r["samples"], cores), "",
          common.table(["algo", "workers", "ranks", "samples/s", "speed-up", "efficiency",
                        "per core", "compute", "comm", "wait", "other", "syncs (rank)"], rows),
          "", "**np 4 oversubscribes this machine.** It has %d cores: at 4 workers (5 ranks "
          "for the server algorithms) the ranks take turns on the cores, so throughput cannot "
          "pass %dx the 1-worker figure, efficiency is at most %d%% by construction, and a "
          "rank that is descheduled while the others wait in an MPI call shows up as "
          "waiting (MPICH's shared-memory wait spins, which takes the core from the rank "
          "that is working). The `per core` column is the fair reading there." % (
              cores, cores, 100 * cores // 4)]
    for what, err in (errors or {}).items():
        md.append("")
        md.append("- %s did not run: `%s`" % (what, err))
    _plot(by, algos)
    md.append("")
    md.append(common.image("scaling", "scaling.png"))
    return common.Section("Throughput and scaling", "\n".join(md),
                          ["throughput speed-up, " + "; ".join(heads)], results)


def _plot(by, algos):
    plt = common.pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for algo in algos:
        xs = [n for n in WORKERS if (algo, n) in by]
        ax.plot(xs, [by[(algo, n)]["throughput"] for n in xs], marker="o", label=algo)
    ax.set_xticks(list(WORKERS))
    ax.set_xlabel("workers")
    ax.set_ylabel("samples / s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(common.result_path("scaling.png"), dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    common.script_main(run, child)
