"""1bit after a warm-up (issue 29: "accuracy with 1bit, after its
warm-up"): the cells of compression_accuracy.py at 4 workers, each
algorithm's `none` run first and then 1bit with `--compression-start K`,
K the first WARMUP share of that `none` run's syncs, so every algorithm
and data set gets the same share of its run uncompressed whatever its sync
period. Prints the gaps; saves results/compression_warmup.json.

    python benchmarks/compression_warmup.py [--share 0.1] [--algos syncgrad,bmuf,sod]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import compression_accuracy as acc  # noqa: E402
import convergence  # noqa: E402

JSON = "compression_warmup.json"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--share", type=float, default=0.1)
    p.add_argument("--algos", default=",".join(acc.ALGOS))
    p.add_argument("--seeds", default="1,2,3")
    args = p.parse_args()
    datasets = {"mnist1d": ([], acc.MNIST1D_EPOCHS),
                "kaldi": (convergence.kaldi_flags(), convergence.KALDI_EPOCHS)}
    data = {"share": args.share, "runs": {}, "start": {}, "load": {}}
    started = time.time()
    for name, (flags, epochs) in datasets.items():
        for seed in [int(s) for s in args.seeds.split(",")]:
            for algo in args.algos.split(","):
                base = flags + ["--algo", algo, "--seed", seed, "--epochs", epochs]
                tag = "warm_%s_%d_%s" % (name, seed, algo)
                before = common.load_average()[0]
                none = convergence.train(tag + "_none", acc.GOAL_N, base)
                start = int(round(args.share * none[-1]["syncs"]))
                onebit = convergence.train(tag + "_1bit", acc.GOAL_N, base + [
                    "--compression", "1bit", "--compression-start", start])
                data["runs"].setdefault(name, {}).setdefault(algo, {})[str(seed)] = {
                    "none": acc._final(none), "1bit": acc._final(onebit)}
                data["start"][tag] = start
                data["load"][tag] = [before, common.load_average()[0]]
                print("  %s: none %.2f%%, 1bit after %d syncs %.2f%%" % (
                    tag, acc._final(none), start, acc._final(onebit)), flush=True)
                common.save_json(JSON, data)
    data["wall_seconds"] = time.time() - started
    common.save_json(JSON, data)
    for name, by_algo in data["runs"].items():
        for algo, seeds in by_algo.items():
            gaps = [s["none"] - s["1bit"] for s in seeds.values()]
            print("%s %s: 1bit after %.0f%% of the syncs, gap to none %+.2f (worst %+.2f) "
                  "over seeds %s" % (name, algo, 100 * args.share, np.mean(gaps), max(gaps),
                                     ",".join(sorted(seeds))))


if __name__ == "__main__":
    main()
