"""Uneven workers (issue 31, item 3): the server algorithms with one of 4
workers at half speed, against the same job with that worker left out, and
with every worker's share of an epoch equal (--work-shares equal, what
every run did before shares by speed) as well as by speed (the default).

Each worker's minibatch takes STEP seconds as on a device of its own
(paced_worker.py). On one host (the default) the slow worker's minibatch
takes 2 x STEP; with --cluster RATE every rank has a namespace host of its
own (rank 0, the server, on h0; links at 1 Gb/s) and the slow worker's host
h4 has its link at RATE instead. Four jobs per algorithm and seed, in turn:
4 even workers; 4 with rank 4 slow, shares by speed; the same with equal
shares; 3 even workers. From each run's --metrics: the wall time to
the first epoch at TARGET held-out accuracy, and the final accuracy.
Prints the table; saves results/uneven_workers.json.

    python benchmarks/uneven_workers.py [--algos easgd,asgd,masgd] [--seeds 1,2]
                                        [--cluster 40mbit]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
import common  # noqa: E402

JSON = "uneven_workers.json"
ALGOS = ("easgd", "asgd", "masgd")
STEP = 0.02             # seconds a minibatch, as on a device
TARGET = 0.90
EPOCHS = 30
# (name, ranks, pacing, extra flags): rank 0 serves
JOBS = (("4 even", 5, {}, []),
        ("4, one slow, by speed", 5, {"slow": 4, "factor": 2}, []),
        ("4, one slow, equal", 5, {"slow": 4, "factor": 2}, ["--work-shares", "equal"]),
        ("3 even (slow one out)", 4, {}, []))


def job(algo, seed, ranks, pacing, flags, link=None):
    """One run; `link`: the slow host's rate across namespace hosts (the
    pacing's slow worker then computes at STEP like the others)."""
    path = common.result_path("uneven_%s_%d.jsonl" % (algo, ranks))
    if os.path.exists(path):
        os.unlink(path)
    load = common.load_average()[0]
    started = time.time()
    argv = [os.path.join(common.HERE, "paced_worker.py"),
            json.dumps(dict(pacing, step=STEP) if link is None else {"step": STEP}),
            "--algo", algo, "--seed", seed, "--epochs", EPOCHS, "--metrics", path,
            "--progress", "off", "--quiet"] + flags
    if link is None:
        common.mpi_run(ranks, argv, timeout=900, pin_blas=True)
    else:
        cluster.tool("slow", "h4", link if pacing else cluster.RATES[0])
        cluster.mpi_run(cluster.layout(ranks, 1), argv, timeout=900)
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    reached = [r["wall_seconds"] for r in rows if r["test_accuracy"] >= TARGET]
    return {"to_target_s": reached[0] if reached else None,
            "final": rows[-1]["test_accuracy"], "wall_s": rows[-1]["wall_seconds"],
            "epoch_s": float(np.median(np.diff([0] + [r["wall_seconds"] for r in rows]))),
            "job_s": time.time() - started, "load": [load, common.load_average()[0]]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--cluster", default=None, metavar="RATE",
                   help="across namespace hosts, the slow worker's host's link at RATE")
    p.add_argument("--jobs", default=",".join(str(i + 1) for i in range(len(JOBS))),
                   help="which jobs, by their place in JOBS from 1, comma-separated "
                        "(default: all)")
    args = p.parse_args()
    if args.cluster:
        why = cluster.why_not()
        if why:
            sys.exit("uneven_workers.py --cluster: %s" % why)
        with cluster.hosts(5, cluster.RATES[0]):
            measure(args, "uneven_workers_cluster.json")
    else:
        measure(args, JSON)


def measure(args, name):
    data = {"step": STEP, "target": TARGET, "epochs": EPOCHS, "link": args.cluster, "runs": {}}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for algo in args.algos.split(","):
            for i, (name_, ranks, pacing, flags) in enumerate(JOBS):
                if str(i + 1) not in args.jobs.split(","):
                    continue
                got = job(algo, seed, ranks, pacing, flags, args.cluster)
                data["runs"].setdefault(algo, {}).setdefault(name_, {})[str(seed)] = got
                print("  %s seed %d, %s: %s to %.0f%%, final %.1f%%, epoch %.2fs (load %.1f)" % (
                    algo, seed, name_, "%.1fs" % got["to_target_s"] if got["to_target_s"]
                    else "never", 100 * TARGET, 100 * got["final"], got["epoch_s"],
                    got["load"][0]), flush=True)
                common.save_json(name, data)
    print(render(data))


def render(data):
    lines = ["| algo | job | time to %.0f%% (s), per seed | final held-out | epoch (s) |"
             % (100 * data["target"]), "|---|---|---|---|---|"]
    for algo in [a for a in ALGOS if a in data["runs"]]:
        jobs = data["runs"][algo]
        for name in [j[0] for j in JOBS if j[0] in jobs]:
            seeds = jobs[name]
            times = ["%.1f" % s["to_target_s"] if s["to_target_s"] else "never"
                     for s in seeds.values()]
            lines.append("| %s | %s | %s | %.1f%% | %.2f |" % (
                algo, name, " / ".join(times), 100 * np.mean([s["final"] for s in seeds.values()]),
                np.mean([s["epoch_s"] for s in seeds.values()])))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
