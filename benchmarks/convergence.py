"""Convergence at scale: held-out accuracy of every algorithm at N = 1, 2, 4
and 8 workers (server algorithms: N workers + 1 server), each with every
default (`--algo X` and nothing else), against one worker at equal total
samples, on MNIST-1D (default CNN) and a synthetic Kaldi-format frame
corpus (tests/kaldi_corpus.py, 2000 utterances). Each run is the trainer CLI:
    mpirun -np P python -m psgd.worker --algo ALGO --seed S --metrics M.jsonl
The 1-worker reference is `--algo bsp` on one rank, run on every seed. All
runs see the same training set per epoch, split across the workers, so equal
samples is the same epoch. Per algorithm and N: the gap to the reference on
the same seeds at the end, over the TUNED_SEEDS (every default was chosen on
them), the HELD_OUT_SEEDS (chosen nothing) and all; and stability, the worst
fall in held-out accuracy between consecutive epochs after STABLE_AFTER (the
whole run where there are no more epochs than that: Kaldi's 5). Besides:
asgd/masgd's delay compensation's wall time per sample against none.

Flags choose a partial grid (they replace PSGD_CONVERGENCE_SEEDS):
    convergence.py --workers 4,8 --seeds 1,2,3,4,5,6 --no-overhead
    convergence.py --datasets kaldi --seeds 4    |    convergence.py --rerender
results/convergence.json is saved after every run (a cut-short grid reports
what finished), with the 1-minute load average around each run: the async
algorithms' staleness, so their accuracy, depends on the machine's load.
"""
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ALGOS = ("bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd")
SERVER = ("easgd", "asgd", "masgd")
WORKERS = (1, 2, 4, 8)
TUNED_SEEDS = (1, 2, 3)            # the seeds every default was chosen on
HELD_OUT_SEEDS = (4, 5, 6)         # seeds no default was chosen on
SEEDS = TUNED_SEEDS + HELD_OUT_SEEDS
DATASETS = ("mnist1d", "kaldi")
MNIST1D_EPOCHS = 30
TARGET = {4: 1.0, 8: 2.0}          # the bar, in points, by N
MAX_DROP = 3.0                     # the bar on an epoch-to-epoch fall, points
STABLE_AFTER = 10                  # epochs before this may still swing while it learns
# 2000 training utterances (40k frames) and 500 held-out (10k frames): with
# 200 / 50 the network overfitted within 10 epochs and one worker's held-out
# accuracy wandered 70.9-73.4% between epochs 4 and 10 (seed 1), so a seed's
# final accuracy could not resolve the 1-point goal. At this size train and
# held-out loss stay level and 5 epochs converge (one worker 74.2-74.9%).
KALDI = {"num_utts": 2000, "dim": 10, "num_classes": 10, "spread": 1.0}
KALDI_HELD_OUT_UTTS = 500
KALDI_EPOCHS = 5
JSON = "convergence.json"


def kaldi_flags():
    """Write the corpus into results/ and return the trainer flags. Files
    whose bytes would not change are left alone and the others replaced
    atomically: other benchmarks (compression_accuracy.py) train on this
    corpus, possibly while this runs."""
    sys.path.insert(0, os.path.join(common.ROOT, "tests"))
    from kaldi_corpus import write_corpus
    folder = common.result_path("kaldi_corpus")
    os.makedirs(folder, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".kaldi-", dir=common.results_dir())
    try:
        train = write_corpus(tmp, seed=0, prefix="train", **KALDI)
        cv = write_corpus(tmp, seed=1, prefix="cv", **dict(KALDI, num_utts=KALDI_HELD_OUT_UTTS))
        for src in list(train.values()) + list(cv.values()):
            dst = os.path.join(folder, os.path.basename(src))
            with open(src, "rb") as f:   # the .scp names its .ark by path
                new = f.read().replace(tmp.encode(), folder.encode())
            old = open(dst, "rb").read() if os.path.exists(dst) else None
            if new != old:
                with open(src, "wb") as f:
                    f.write(new)
                os.replace(src, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    at = lambda name: os.path.join(folder, name)  # noqa: E731
    return ["--feats", "scp:" + at("train_feats.scp"), "--targets", "ark:" + at("train_ali.ark"),
            "--cv-feats", "scp:" + at("cv_feats.scp"), "--cv-targets", "ark:" + at("cv_ali.ark")]


def train(tag, np_, flags):
    path = common.result_path("convergence_%s.jsonl" % tag)
    common.mpi_run(np_, ["psgd.worker", "--metrics", path, "--progress", "off", "--quiet"]
                   + flags, module=True, timeout=900, pin_blas=True)
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    return rows


def ranks(algo, workers):
    return workers + 1 if algo in SERVER else workers


def _ints(text):
    return tuple(int(x) for x in text.split(",") if x.strip())


def add_arguments(p):
    p.add_argument("--workers", type=_ints, default=None,
                   help="comma-separated N (default 1,2,4,8); the 1-worker reference always runs")
    p.add_argument("--seeds", type=_ints, default=None, help="comma-separated (default 1-6)")
    p.add_argument("--datasets", type=lambda s: tuple(x for x in s.split(",") if x),
                   default=None, help="comma-separated: " + ",".join(DATASETS))
    p.add_argument("--no-overhead", action="store_true",
                   help="skip the delay-compensation timing (kept from the last full run)")
    p.add_argument("--rerender", dest="render_only", action="store_true",
                   help="print the report from results/convergence.json, measuring nothing")


def _interleave(seeds):
    # tuned and held-out alternating (1, 4, 2, 5, ...): a grid cut short
    # after k seeds still has both kinds in every cell
    tuned, held = [s for s in seeds if s in TUNED_SEEDS], [s for s in seeds if s not in TUNED_SEEDS]
    return [s for i in range(max(len(tuned), len(held))) for s in tuned[i:i + 1] + held[i:i + 1]]


def run(quick=False, workers=None, seeds=None, datasets=None, no_overhead=False,
        render_only=False):
    if render_only:
        return rerender()
    if os.environ.get("PSGD_CONVERGENCE_SEEDS"):
        print("PSGD_CONVERGENCE_SEEDS is no longer read: use --seeds/--workers/--datasets",
              file=sys.stderr)
    common.results_dir()
    started = time.time()
    names = datasets or DATASETS
    epochs = {"mnist1d": 3 if quick else MNIST1D_EPOCHS, "kaldi": 1 if quick else KALDI_EPOCHS}
    flags = {name: kaldi_flags() if name == "kaldi" else [] for name in names}
    algos = ("bsp", "asgd") if quick else ALGOS
    seeds = _interleave(seeds or ((1, 4) if quick else SEEDS))
    workers = sorted(set(workers or ((1, 4) if quick else WORKERS)), reverse=True)
    data = {"seeds": sorted(seeds), "tuned_seeds": list(TUNED_SEEDS), "quick": quick,
            "held_out_seeds": list(HELD_OUT_SEEDS), "started": started, "workers": workers,
            "datasets": {n: {"epochs": epochs[n], "runs": {}} for n in names},
            "errors": {}, "load": {}, "seconds": {}, "overhead": None}
    if not no_overhead:
        data["overhead"] = overhead(quick)
    elif not _previous().get("quick") and _previous().get("overhead"):
        # an earlier full run's timing stays, marked as such
        data["overhead"], data["overhead_carried"] = _previous()["overhead"], True
    # seed by seed, each seed's reference first, then the largest N first:
    # every run saves, and a cut-short grid has every cell on the same seeds
    for seed in seeds:
        for name in names:
            _train_cell(data, name, flags[name], epochs[name], "1 worker", 1, seed)
            for N in workers:
                for algo in algos:
                    if not (algo == "bsp" and N == 1):
                        _train_cell(data, name, flags[name], epochs[name], algo, N, seed)
    data["wall_seconds"] = time.time() - started
    common.save_json(JSON, data)
    return report(data)


def _train_cell(data, name, flags, epochs, algo, N, seed):
    """One run into data (bsp on one rank is the 1-worker reference)."""
    real = "bsp" if algo == "1 worker" else algo
    tag = "%s_%s_%d_%d" % (name, "ref" if algo == "1 worker" else algo, N, seed)
    before, t0 = common.load_average()[0], time.time()
    try:
        rows = train(tag, ranks(real, N), flags + ["--algo", real, "--epochs", epochs,
                                                   "--seed", seed])
    except RuntimeError as exc:  # one broken run must not hide the others
        data["errors"][tag] = common.error_line(exc)
        print("  %s: %s" % (tag, data["errors"][tag]), flush=True)
    else:
        runs = data["datasets"][name]["runs"]
        runs.setdefault(algo, {}).setdefault(str(N), {})[str(seed)] = rows
        print("  %s: %.1f%% (%.0f s)" % (tag, 100 * (rows[-1]["test_accuracy"] or 0.0),
                                        time.time() - t0), flush=True)
    data["load"][tag] = [before, common.load_average()[0]]
    data["seconds"][tag] = time.time() - t0
    data["wall_seconds"] = time.time() - data["started"]
    common.save_json(JSON, data)


def overhead(quick):
    """Wall time per sample, asgd/masgd with their default delay compensation
    against none, alternating so both see the same machine load."""
    out = {}
    for algo in ("asgd", "masgd"):
        for N in ((4,) if quick else (8,)):
            walls = {"dc": [], "none": []}
            for _ in range(1 if quick else 2):
                for comp in ("dc", "none"):
                    rows = train("overhead", ranks(algo, N), [
                        "--algo", algo, "--epochs", 2 if quick else 5,
                        "--staleness-compensation", comp])
                    walls[comp].append(rows[-1]["wall_seconds"] / rows[-1]["samples"])
            out["%s %d" % (algo, N)] = {k: float(np.median(v)) for k, v in walls.items()}
    return out


def rerender():
    return report(common.load_json(JSON))


def report(data):
    import convergence_report
    return convergence_report.report(data)


def _previous():
    try:
        return common.load_json(JSON)
    except (OSError, ValueError):
        return {}


if __name__ == "__main__":
    common.script_main(run, add_arguments=add_arguments)
