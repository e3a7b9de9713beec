"""--survive-worker-loss against the uninterrupted run (Open MPI with ULFM,
one host): for each server algorithm and seed, 4 ranks (a server and 3
workers) train the trainer's default CNN, once untouched and once with
worker rank 3 killed (SIGKILL from outside, as the OOM killer would) at a
random moment of the middle third of the run. Measured, one run after the
other: final held-out accuracy of both; the epoch of the loss; seconds
from the kill to the server's line naming the worker, to the survivors'
"going on" line (the epoch's end, the Agree, the Shrink and the handover
done) and to the next epoch's line (the epoch's end run again by them);
the median epoch; each run's wall time.

    .venv-ompi/bin/python benchmarks/worker_loss.py [--algos easgd,asgd,masgd] [--seeds 3]
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = sys.executable
MPIRUN = os.path.join(os.path.dirname(PYTHON), "mpirun")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", PYTHONPATH=ROOT, PSGD_CACHE_DIR=os.path.join(ROOT, ".cache"))


def rank_pid(work, rank):
    """The pid of MPI rank `rank` of the job running in folder `work`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/cwd" % pid) != work:
                continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK=%d" % rank in env:
            return int(pid)
    return None


def one_run(algo, seed, epochs, kill_at):
    """{rows, wall, and after a kill: epoch (the job's "in epoch N"), noticed_s
    (the server's line), on_s (the survivors' "going on" line), next_s (the
    next epoch's line), each seconds after the kill}."""
    work = tempfile.mkdtemp(prefix="psgd-loss-")
    cmd = [MPIRUN, "--with-ft", "ulfm", "--oversubscribe", "-np", "4", PYTHON, "-m",
           "psgd.worker", "--algo", algo, "--seed", str(seed), "--epochs", str(epochs),
           "--survive-worker-loss", "--metrics", "m.jsonl"]
    start = time.time()
    job = subprocess.Popen(cmd, cwd=work, env=ENV, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    lines = []          # (time, line) of stdout and stderr
    readers = [threading.Thread(target=lambda f=f: lines.extend((time.time(), l) for l in f),
                                daemon=True) for f in (job.stdout, job.stderr)]
    for r in readers:
        r.start()
    killed = None
    if kill_at is not None:
        path = os.path.join(work, "m.jsonl")
        while job.poll() is None:
            if len(_rows(path)) >= kill_at[0]:
                time.sleep(kill_at[1])
                pid = rank_pid(work, 3)
                if pid:
                    os.kill(pid, 9)
                    killed = time.time()
                break
            time.sleep(0.01)
    job.wait(600)
    for r in readers:
        r.join()
    result = dict(rows=_rows(os.path.join(work, "m.jsonl")), wall=time.time() - start)
    shutil.rmtree(work, ignore_errors=True)
    text = "".join(l for _, l in lines)
    if job.returncode != 0:
        raise SystemExit("%s seed %d: exit %d\n%s" % (algo, seed, job.returncode, text[-2000:]))
    lost = re.search(r"lost rank 3 on \S+ in epoch (\d+)", text)
    if (killed is not None) != (lost is not None):
        raise SystemExit("%s seed %d: rank 3 %s\n%s" % (
            algo, seed, "not killed" if lost is None else "lost unasked", text[-2000:]))
    if killed is not None:
        epoch = int(lost.group(1))
        def after(needle):
            return next(t for t, l in lines if needle in l) - killed
        result.update(epoch=epoch, noticed_s=after("worker rank 3 lost"),
                      on_s=after("going on with"), next_s=after(" epoch %d/" % (epoch + 1)))
    return result


def _rows(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--algos", default="easgd,asgd,masgd")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=30)
    args = p.parse_args()
    rng = random.Random(1)
    print("| algo | seed | uninterrupted | worker lost | loss in epoch | kill to server's "
          "line, s | kill to going on, s | kill to next epoch, s | median epoch, s | wall s, "
          "both |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for algo in args.algos.split(","):
        gaps = []
        for seed in range(1, args.seeds + 1):
            kill_at = (rng.randrange(args.epochs // 3, 2 * args.epochs // 3), rng.random() * 0.3)
            a = one_run(algo, seed, args.epochs, None)
            b = one_run(algo, seed, args.epochs, kill_at)
            acc_a, acc_b = a["rows"][-1]["test_accuracy"], b["rows"][-1]["test_accuracy"]
            rows = a["rows"]
            median = statistics.median(r["wall_seconds"] - q["wall_seconds"]
                                       for q, r in zip(rows, rows[1:]))
            gaps.append(100 * (acc_b - acc_a))
            print("| %s | %d | %.2f%% | %.2f%% | %d | %.2f | %.2f | %.2f | %.2f | %.1f / %.1f |"
                  % (algo, seed, 100 * acc_a, 100 * acc_b, b["epoch"], b["noticed_s"],
                     b["on_s"], b["next_s"], median, a["wall"], b["wall"]), flush=True)
        print("| %s | mean | | %+.2f pt | | | | | | |" % (algo, statistics.mean(gaps)),
              flush=True)


if __name__ == "__main__":
    main()
