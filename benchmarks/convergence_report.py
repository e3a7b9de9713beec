"""The convergence grid's report (benchmarks/convergence.py measures): gaps
to one worker by seed group, the stability column, the plots."""
import os

import numpy as np

import common
from convergence import (ALGOS, HELD_OUT_SEEDS, KALDI, KALDI_HELD_OUT_UTTS, MAX_DROP,
                         STABLE_AFTER, TARGET, TUNED_SEEDS)


def _final(rows):
    return 100 * (rows[-1]["test_accuracy"] or 0.0)


def _drop(rows, after):
    """(largest fall in points, from epoch, to epoch) between consecutive
    epochs that both come after `after`; a run that only rises gives <= 0."""
    acc = [(r["epoch"], 100 * (r["test_accuracy"] or 0.0)) for r in rows if r["epoch"] > after]
    pairs = [(a1 - a2, e1, e2) for (e1, a1), (e2, a2) in zip(acc, acc[1:])]
    return max(pairs) if pairs else (float("nan"), 0, 0)


def summarize(runs, groups, after):
    """(algo, N) -> {"mean", "spread" (half-range), "gap": {group:
    (gap to one worker on the same seeds, seeds)}, "drop": (points, seed,
    from, to)}; and the reference's mean over all its seeds."""
    ref = {seed: _final(rows) for seed, rows in runs["1 worker"]["1"].items()}
    out = {}
    for algo, by_n in runs.items():
        for N, by_seed in by_n.items():
            finals = {seed: _final(r) for seed, r in by_seed.items()}
            gap = {}
            for group, members in groups.items():
                both = [s for s in finals if s in ref and int(s) in members]
                gap[group] = (float(np.mean([ref[s] - finals[s] for s in both]))
                              if both else float("nan"), len(both))
            drops = [_drop(r, after) + (seed,) for seed, r in by_seed.items()]
            worst = max(drops, key=lambda d: -np.inf if d[0] != d[0] else d[0])
            vals = list(finals.values())
            out[(algo, int(N))] = {"mean": float(np.mean(vals)), "gap": gap,
                                   "spread": (max(vals) - min(vals)) / 2,
                                   "drop": (worst[0], worst[3], worst[1], worst[2])}
    out[("bsp", 1)] = out[("1 worker", 1)]
    return out, float(np.mean(list(ref.values())))


def _gap_cell(cell, N, groups):
    if cell is None:
        return "-", True
    parts, met = [], True
    for group in groups:
        gap, count = cell["gap"][group]
        if count == 0:
            parts.append("-")
            continue
        # two decimals: one rounds 2.03 to a "+2.0" that fails a 2.0 goal
        parts.append("%+.2f%s" % (gap, "" if count == len(groups[group]) else " [%d]" % count))
        met = met and gap <= TARGET[N]
    return " / ".join(parts) + " " + ("✓" if met else "✗"), met


def report(data):
    if "datasets" not in data:   # saved by the previous, 4-worker-only script
        return common.Section("Convergence at 1, 2, 4 and 8 workers",
                              "Not measured yet with this script: run `make bench`.",
                              ["convergence: not measured with the current script"], data)
    tuned = data.get("tuned_seeds", TUNED_SEEDS)
    held = data.get("held_out_seeds", HELD_OUT_SEEDS)
    seeds = [int(s) for s in data["seeds"]]
    groups = {"tuned": [s for s in seeds if s in tuned],
              "held-out": [s for s in seeds if s in held], "all": seeds}
    groups = {k: v for k, v in groups.items() if v}
    md, heads, misses, worst = [], [], [], (-np.inf, "")
    if data.get("quick"):
        md += ["**A --quick smoke run: 3 / 1 epochs, two algorithms; not a measurement.**", ""]
    for name in sorted(data["datasets"], key=lambda n: n != "mnist1d"):
        block = data["datasets"][name]
        runs = block["runs"]
        if "1 worker" not in runs:
            continue
        after = STABLE_AFTER if block["epochs"] > STABLE_AFTER + 1 else 0
        stats, ref = summarize(runs, groups, after)
        Ns = sorted({N for (_, N) in stats})
        what = ("MNIST-1D, default CNN, 4000 training samples per epoch" if name == "mnist1d"
                else "synthetic Kaldi corpus (tests/kaldi_corpus.py: %d utterances, %d-dim "
                     "features, %d classes, prototype spread %.1f; %d held out), frame accuracy" % (
                         KALDI["num_utts"], KALDI["dim"], KALDI["num_classes"], KALDI["spread"],
                         KALDI_HELD_OUT_UTTS))
        md += ["**%s**, %d epochs, seeds %s (tuned: %s; held out: %s); one worker: %.2f%%. "
               "Each cell: mean final held-out accuracy over all seeds ± half their range, then "
               "the gap to one worker on the same seeds in points (positive = worse; [k]: only "
               "k seeds finished). (!) marks a gap above the goal (1.0 point at 4 workers, "
               "2.0 at 8)." % (what, block["epochs"], ",".join(map(str, seeds)),
                               ",".join(map(str, groups.get("tuned", []))) or "none",
                               ",".join(map(str, groups.get("held-out", []))) or "none", ref), ""]
        rows = []
        for algo in ALGOS:
            cells = []
            for N in Ns:
                if (algo, N) not in stats:
                    cells.append("-")
                    continue
                c = stats[(algo, N)]
                gap, count = c["gap"]["all"]
                flag = " (!)" if N in TARGET and gap > TARGET[N] else ""
                cells.append("%.1f%% ± %.1f (%+.1f)%s%s" % (
                    c["mean"], c["spread"], gap, flag,
                    "" if count == len(seeds) else " [%d]" % count))
            rows.append([algo] + cells)
        md += [common.table(["algo"] + ["N = %d" % N for N in Ns], rows), ""]
        goal_Ns = [N for N in Ns if N in TARGET]
        if goal_Ns:
            md += ["Gap to one worker by seed group, points: %s (each the mean over the "
                   "group's seeds, paired with one worker on the same seeds). ✓: every group "
                   "within the goal (%s); ✗: at least one is not." % (
                       " / ".join(groups), ", ".join("%.1f at N = %d" % (TARGET[N], N)
                                                     for N in goal_Ns)), ""]
            rows = [[algo] + [_gap_cell(stats.get((algo, N)), N, groups)[0] for N in goal_Ns]
                    for algo in ALGOS]
            for algo, N in [(a, N) for a in ALGOS for N in goal_Ns if (a, N) in stats]:
                text, met = _gap_cell(stats[(algo, N)], N, groups)
                heads.append("%s %s at %d: %s" % (name, algo, N, text))
                misses += [] if met else ["%s, %s at %d workers: gap %s" % (name, algo, N, text)]
            md += [common.table(["algo"] + ["N = %d (%s)" % (N, " / ".join(groups))
                                            for N in goal_Ns], rows), ""]
        window = ("after epoch %d (epochs %d-%d)" % (after, after + 1, block["epochs"]) if after
                  else "over the whole run (epochs 1-%d: this data set runs only %d epochs)" % (
                      block["epochs"], block["epochs"]))
        md += ["Stability: the largest fall in held-out accuracy between consecutive epochs "
               "%s, worst over every seed's run, in points, with its seed and epochs (≤ 0: "
               "it never fell). ✓: at most %.1f points." % (window, MAX_DROP), ""]
        rows = []
        for algo in ("1 worker",) + ALGOS:
            row = [algo]
            for N in Ns:
                if (algo, N) not in stats or (algo == "bsp" and N == 1) or (
                        algo == "1 worker" and N != 1):
                    row.append("-")
                    continue
                drop, seed, e1, e2 = stats[(algo, N)]["drop"]
                if drop != drop:
                    row.append("n/a")
                    continue
                row.append("%.1f (seed %s, %d→%d) %s" % (
                    drop, seed, e1, e2, "✓" if drop <= MAX_DROP else "✗"))
                where = "%s, %s, seed %s, epoch %d→%d" % (
                    name, algo if N == 1 else "%s at %d workers" % (algo, N), seed, e1, e2)
                worst = max(worst, (drop, where))
                if drop > MAX_DROP:
                    misses.append("%s: fell %.1f points" % (where, drop))
            rows.append(row)
        md += [common.table(["algo"] + ["N = %d" % N for N in Ns], rows), ""]
        _plot(name, runs, Ns)
        for what in ("samples", "wall"):
            md.append(common.image("%s accuracy vs %s" % (name, what),
                                   "convergence_%s_%s.png" % (name, what)))
        md.append("")
    loads = [x for pair in data.get("load", {}).values() for x in pair if x == x]
    md.append("Wall times in the plots are on this %d-core machine: 4 and 8 workers "
              "(5 and 9 ranks for the server algorithms) oversubscribe it, and other jobs "
              "shared it, so only the accuracy is a property of the algorithm.%s%s" % (
                  os.cpu_count() or 1,
                  " The grid took %.1f minutes." % (data["wall_seconds"] / 60)
                  if data.get("wall_seconds") else "",
                  " 1-minute load average before and after each run: %.1f-%.1f." % (
                      min(loads), max(loads)) if loads else ""))
    md.append("")
    if data.get("overhead"):
        md += ["Wall time per sample of asgd/masgd with their default delay compensation "
               "(dc) against none, same runs alternating (%s; oversubscribed as above)%s:" % (
                   "one each, 2 epochs" if data.get("quick") else "median of 2, 5 epochs each",
                   "; measured by an earlier run of this script, not with this grid"
                   if data.get("overhead_carried") else ""), ""]
        rows = [[k, "%.1f us" % (1e6 * v["dc"]), "%.1f us" % (1e6 * v["none"]),
                 "%.3fx" % (v["dc"] / v["none"])] for k, v in data["overhead"].items()]
        md += [common.table(["algo, N", "dc", "none", "dc / none"], rows), ""]
    md += ["Goals not met: none." if not misses else "Goals not met:"] + [
        "- " + m for m in misses] + [""]
    if worst[1]:
        md += ["Largest fall anywhere in the grid: %.1f points (%s)%s." % (
            worst + (": it only rose" if worst[0] <= 0 else "",)), ""]
    for tag, err in data.get("errors", {}).items():
        md.append("- %s did not run: `%s`" % (tag, err))
    return common.Section("Convergence at 1, 2, 4 and 8 workers", "\n".join(md),
                          ["accuracy gap to 1 worker, points (%s): %s" % (
                              " / ".join(groups), "; ".join(heads)),
                           "goals not met: %d%s" % (len(misses), "" if not worst[1] else
                                                    "; largest fall %.1f points (%s)" % worst)],
                          data)


def _mean_curve(by_seed, key):
    curves = [[r[key] for r in rows] for rows in by_seed.values()]
    n = min(len(c) for c in curves)
    return np.mean([c[:n] for c in curves], axis=0)


def _plot(name, runs, Ns):
    plt = common.pyplot()
    if plt is None:
        return
    shown = [N for N in (4, 8) if N in Ns] or Ns[-1:]
    for what, key, label in (("samples", "samples", "training samples (all workers)"),
                             ("wall", "wall_seconds", "wall time (s), oversubscribed")):
        fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4.2), squeeze=False)
        for ax, N in zip(axes[0], shown):
            ref = runs["1 worker"]["1"]
            ax.plot(_mean_curve(ref, key), 100 * _mean_curve(ref, "test_accuracy"),
                    color="black", linewidth=2.5, label="1 worker")
            for algo in ALGOS:
                if str(N) in runs.get(algo, {}):
                    by_seed = runs[algo][str(N)]
                    ax.plot(_mean_curve(by_seed, key), 100 * _mean_curve(by_seed, "test_accuracy"),
                            linewidth=1.2, label=algo)
            ax.set_title("%s, %d workers (mean of seeds)" % (name, N))
            ax.set_xlabel(label)
            ax.set_ylabel("held-out accuracy (%)")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(common.result_path("convergence_%s_%s.png" % (name, what)), dpi=80)
        plt.close(fig)


