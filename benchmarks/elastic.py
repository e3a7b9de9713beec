"""bin/psgd-elastic under host loss, on namespace hosts (root, MPICH): for
each algorithm and seed, a run no fault touches and a run one of whose two
hosts (2 ranks each) is killed at a random moment, side by side. Measured:
seconds from the kill to the survivors' resume and to their first finished
epoch (the first sync is inside it), finished epochs redone, and the final
held-out accuracy of both runs. The loop of kills is also the stress test
the CI's single cluster run stands for.

    .venv/bin/python benchmarks/elastic.py [--algos bmuf,easgd] [--seeds 3] [--epochs 20]
        [--model mlp|cnn]
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
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402
import common  # noqa: E402

cluster.NAME = "elastic"
ELASTIC = os.path.join(common.ROOT, "bin", "psgd-elastic")
WORK = os.path.join(common.ROOT, ".cache", "cluster-work", "bench-elastic")


MODELS = {"mlp": ["--model", "mlp", "--hidden", "256"], "cnn": ["--model", "cnn"]}


def one_run(algo, seed, epochs, kill, extra=(), model="mlp"):
    """{accuracy, and with `kill`: victim, killed_after_s, resume_s, first_epoch_s, redone}."""
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    cmd = [sys.executable, ELASTIC, "--hosts", "h0:2,h1:2", "--launcher",
           "%s %s mpirun" % (sys.executable, cluster.TOOL), "--algo", algo] + MODELS[model] + [
           "--epochs", str(epochs), "--seed", str(seed),
           "--checkpoint-dir", "ck", "--metrics", "metrics.jsonl"] + list(extra)
    env = cluster._env(common.child_env(pin_blas=True))
    job = subprocess.Popen(cmd, cwd=WORK, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True,
                           stdin=subprocess.DEVNULL)
    seen, err = [], []
    reader = threading.Thread(target=lambda: seen.extend(
        (time.time(), line) for line in job.stdout), daemon=True)
    errs = threading.Thread(target=lambda: err.extend(job.stderr), daemon=True)
    reader.start()
    errs.start()
    result = {}
    if kill:
        # anywhere from the first finished epoch to about 60% of the run
        after = random.randint(1, max(1, int(0.6 * epochs)))
        ends = [wait_line(seen, job, " epoch %d/" % e) for e in (after, after + 1)]
        time.sleep(random.uniform(0, ends[1] - ends[0]))
        victim = random.choice(("h0", "h1"))
        killed = time.time()
        cluster.tool("kill", victim)
        result.update(victim=victim)
    code = job.wait(900)
    reader.join()
    errs.join()
    if code != 0:
        raise RuntimeError("%s seed %d: psgd-elastic exit %d:\n%s" % (
            algo, seed, code, "".join(err)[-3000:]))
    if kill:
        after = [(t, l) for t, l in seen if t > killed]
        resumed = next(t for t, l in after if "resumed from epoch" in l)
        first = next(t for t, l in after if t >= resumed and re.search(r"\) epoch \d+/", l))
        line = next(l for l in err if l.startswith("psgd-elastic: restart 1/"))
        result.update(resume_s=resumed - killed, first_epoch_s=first - killed,
                      redone=int(re.search(r"\((\d+) finished epochs? redone", line).group(1)),
                      restart_line=line.strip())
    with open(os.path.join(WORK, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    result.update(accuracy=rows[-1]["test_accuracy"], epochs=rows[-1]["epoch"])
    return result


def wait_line(seen, job, text):
    """When a line holding `text` came out."""
    while True:
        found = [t for t, line in seen if text in line]
        if found:
            return found[0]
        if job.poll() is not None:
            raise RuntimeError("the run ended before %r" % text)
        time.sleep(0.02)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--algos", default="bmuf,easgd")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--model", choices=sorted(MODELS), default="mlp",
                   help="mlp: --model mlp --hidden 256; cnn: the trainer's default CNN")
    p.add_argument("--same-ranks", action="store_true",
                   help="restart on 4 ranks (2 per survivor's slot) rather than 2")
    args = p.parse_args()
    extra = ["--same-ranks"] if args.same_ranks else []
    why = cluster.why_not()
    if why:
        sys.exit("benchmarks/elastic.py: not measured: %s" % why)
    results = []
    with cluster.hosts(2, "1gbit"):
        for algo in args.algos.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                whole = one_run(algo, seed, args.epochs, kill=False, extra=extra,
                                model=args.model)
                cluster.tool("down")
                cluster.tool("up", 2, "--rate", "1gbit")
                lost = one_run(algo, seed, args.epochs, kill=True, extra=extra, model=args.model)
                cluster.tool("down")
                cluster.tool("up", 2, "--rate", "1gbit")
                results.append(dict(algo=algo, seed=seed, uninterrupted=whole["accuracy"],
                                    **lost))
                print(json.dumps(results[-1]), flush=True)
    os.makedirs(common.RESULTS, exist_ok=True)
    with open(os.path.join(common.RESULTS, "elastic%s%s%s.json" % (
            "-same-ranks" if args.same_ranks else "",
            "" if args.model == "mlp" else "-" + args.model,
            "" if args.first_seed == 1 else "-from-seed-%d" % args.first_seed)), "w") as f:
        json.dump(results, f, indent=1)
    print("\n| algo | runs | host killed | kill to resume, s | kill to first epoch, s "
          "| epochs redone | accuracy after a loss | uninterrupted | difference |")
    print("|---|---|---|---|---|---|---|---|---|")
    for algo in args.algos.split(","):
        rs = [r for r in results if r["algo"] == algo]
        mean = lambda k: statistics.mean(r[k] for r in rs)  # noqa: E731
        print("| %s | %d | %s | %.1f (max %.1f) | %.1f (max %.1f) | %.1f (max %d) | %.2f%% | "
              "%.2f%% | %+.2f |" % (
                  algo, len(rs), ",".join(r["victim"] for r in rs), mean("resume_s"),
                  max(r["resume_s"] for r in rs), mean("first_epoch_s"),
                  max(r["first_epoch_s"] for r in rs), mean("redone"),
                  max(r["redone"] for r in rs), 100 * mean("accuracy"),
                  100 * mean("uninterrupted"), 100 * (mean("accuracy") - mean("uninterrupted"))))


if __name__ == "__main__":
    main()
