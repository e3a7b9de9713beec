"""Run every benchmark and write BENCHMARKS.md at the repo root.

    .venv/bin/python benchmarks/run_all.py            # the full run (make bench)
    .venv/bin/python benchmarks/run_all.py --quick    # a smoke run, small sizes
    .venv/bin/python benchmarks/run_all.py --only sync_overhead,memory  # the rest kept
    .venv/bin/python benchmarks/run_all.py --regime shm  # MPI through shared memory only
    .venv/bin/python benchmarks/run_all.py --regime cluster  # across namespace hosts (root)

MPI parts are launched with the mpirun beside this interpreter; the
sections that take a regime run once through shared memory and once with
MPI forced through its network path (`--regime`, benchmarks/common.py). Results
(JSON, PNG) go to benchmarks/results/; BENCHMARKS.md references them. The
machine's other load is sampled before the run and between sections (the
CPU share used while no benchmark runs) and reported, since timings on a
shared machine are only as good as its quiet. With --only (or a --regime
that leaves sections out), only the sections measured are written: the
others stay in BENCHMARKS.md as they are, notes written into them by hand
included (report_splice.py), and the closing table says when each section
was measured. --render rewrites the whole file from the saved results.
"""
import argparse
import inspect
import datetime
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
import mpi_regimes  # noqa: E402
import report_splice  # noqa: E402

if common.ROOT not in sys.path:
    sys.path.insert(1, common.ROOT)   # psgd from the checkout when not installed

SECTIONS = ("sync_overhead", "server_roundtrip", "server_throughput", "accel", "scaling",
            "convergence", "memory", "gpu_staging", "torch_ddp", "cluster_sync",
            "cluster_hierarchy", "cluster_servers", "cluster_torch", "compression",
            "compression_accuracy", "cluster_e2e")
# The cluster regime's sections: jobs across namespace hosts (root only),
# run by `--regime cluster` and otherwise kept from their saved results.
CLUSTER_SECTIONS = ("cluster_sync", "cluster_hierarchy", "cluster_servers", "cluster_torch",
                     "cluster_e2e")


def cpu_busy(seconds=1.0):
    """Share of all cores busy over `seconds` (from /proc/stat), or None."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def prepare_data():
    """Generate the MNIST-1D sets the runs use once, so no rank pays for it
    inside a timed run."""
    from psgd.data import load_mnist1d
    for n in (5000, 2500, 20000):
        load_mnist1d(n, seed=42)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--only", default=None, help="comma-separated sections: " + ", ".join(SECTIONS))
    p.add_argument("--out", default=os.path.join(common.ROOT, "BENCHMARKS.md"))
    p.add_argument("--render", action="store_true",
                   help="rewrite the report from benchmarks/results/ without measuring")
    p.add_argument("--regime", default="both", choices=mpi_regimes.REGIMES + ("both", "cluster"),
                   help="MPI on one machine through shared memory, through its network "
                        "path, or both (default); or `cluster`: the sections across "
                        "namespace hosts (bin/psgd-local-cluster, root)")
    args = p.parse_args(argv)
    chosen = tuple(s for s in args.only.split(",") if s) if args.only else tuple(
        s for s in SECTIONS if (s in CLUSTER_SECTIONS) == (args.regime == "cluster"))
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        p.error("unknown section(s) %s; valid: %s" % (", ".join(unknown), ", ".join(SECTIONS)))
    one_machine = [s for s in chosen if s not in CLUSTER_SECTIONS]
    if args.regime == "cluster" and one_machine:
        p.error("--only %s: not across hosts; --regime cluster runs %s" % (
            ",".join(one_machine), ", ".join(CLUSTER_SECTIONS)))
    if args.render:
        return render_saved(chosen if args.only else SECTIONS, args.out)
    started = time.time()
    measured = _saved_meta().get("measured", {})
    machine = common.machine_info()
    busy = {"before": cpu_busy(2.0), "between": []}
    load = [common.load_average()]
    prepare_data()
    partial = set(chosen) != set(SECTIONS) and os.path.exists(args.out)
    old_heads = [h for name in chosen for h in _saved_headlines(name)] if partial else []
    sections, timings = [], {}
    for name in chosen:
        print("== %s" % name, flush=True)
        t0 = time.time()
        try:
            module = __import__(name)
            takes_regime = ("regime" in inspect.signature(module.run).parameters
                            and args.regime != "cluster")
            section = module.run(quick=args.quick,
                                 **({"regime": args.regime} if takes_regime else {}))
        except Exception as exc:   # report it and go on: one broken part hides nothing else
            traceback.print_exc()
            section = common.Section(name, "**Failed:** `%s`" % str(exc).strip().splitlines()[0]
                                     [:400] if str(exc).strip() else type(exc).__name__,
                                     ["%s: failed" % name])
        timings[name] = time.time() - t0
        measured[name] = {"at": t0, "seconds": timings[name], "quick": args.quick}
        sections.append(section)
        busy["between"].append(cpu_busy(1.0))
        load.append(common.load_average())
        print("   %.0f s" % timings[name], flush=True)
    fresh = sections
    sections = [s for _, s in _with_saved(dict(zip(chosen, sections)))]
    text = render(machine, busy, load, sections, timings, started, args.quick,
                  measured=measured, chosen=chosen, spliced=partial)
    if partial:
        with open(args.out) as f:
            text, missing = report_splice.splice(
                f.read(), text, [s.title for s in fresh], old_heads,
                [h for s in fresh for h in s.headlines])
        for h in missing:
            print("run_all: headline not found in %s (edited by hand?), left as it is: %s" % (
                args.out, h), file=sys.stderr)
    with open(args.out, "w") as f:
        f.write(text)
    common.save_json("run_all.json", {"machine": machine, "busy": busy, "load": load,
                                      "timings": timings, "quick": args.quick,
                                      "started": started, "minutes": (time.time() - started) / 60,
                                      "measured": measured, "chosen": list(chosen)})
    print("wrote %s (%.0f s)" % (args.out, time.time() - started))
    return 0


def _saved_meta():
    try:
        return common.load_json("run_all.json")
    except (OSError, ValueError):
        return {}


def _saved_headlines(name):
    """Section `name`'s headlines as its saved results render them (what
    BENCHMARKS.md shows of it before this run), or none."""
    try:
        return __import__(name).rerender().headlines
    except (OSError, ValueError, KeyError):
        return []


def _with_saved(fresh):
    """[(name, Section)] of every section in report order: those just
    measured (`fresh`, by name), and the others re-rendered from their saved
    results where there are any."""
    out = []
    for name in SECTIONS:
        if name in fresh:
            out.append((name, fresh[name]))
            continue
        try:
            out.append((name, __import__(name).rerender()))
        except (OSError, ValueError, KeyError):
            pass   # never measured: nothing to show
    return out


def render_saved(chosen, out):
    """BENCHMARKS.md again from the last run's saved results (after editing
    the report code or FINDINGS.md): the whole file, or (--only) the
    `chosen` sections spliced into it with the blocks the run owns."""
    meta = common.load_json("run_all.json")
    sections = _with_saved({})
    partial = set(chosen) != set(SECTIONS) and os.path.exists(out)
    text = render(meta["machine"], meta["busy"], meta["load"], [s for _, s in sections],
                  meta["timings"],
                  meta["started"], meta["quick"], meta["minutes"],
                  measured=meta.get("measured", {}), chosen=meta.get("chosen", SECTIONS),
                  spliced=partial)
    if partial:
        mine = [s for name, s in sections if name in chosen]
        heads = [h for s in mine for h in s.headlines]
        with open(out) as f:
            text, _ = report_splice.splice(f.read(), text, [s.title for s in mine], heads, heads)
    with open(out, "w") as f:
        f.write(text)
    print("wrote %s from saved results" % out)
    return 0


def _pct(x):
    return "n/a" if x is None else "%.0f%%" % (100 * x)


def _utc(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


def render(machine, busy, load, sections, timings, started, quick, minutes=None,
           measured=None, chosen=SECTIONS, spliced=False):
    cores = machine["cores"] or 1
    between = [b for b in busy["between"] if b is not None]
    worst_between = max(between) if between else None
    max_load = max(l[0] for l in load)
    noisy = (busy["before"] or 0) > 0.15 or (worst_between or 0) > 0.15
    out = ["# psgd benchmarks", "",
           "Generated by `make bench` (`benchmarks/run_all.py%s`) on %s UTC in %.0f minutes. "
           "Every figure below is a ratio or a curve measured in this one run; re-running "
           "rewrites this file. Scripts: `benchmarks/`; raw results and plots: "
           "`benchmarks/results/`." % (" --quick" if quick else "",
                                        _utc(started),
                                        minutes if minutes is not None
                                        else (time.time() - started) / 60), ""]
    kept = [k for k in (measured or {}) if k not in chosen]
    if kept:
        out[-2] = out[-2].replace(
            "Every figure below is a ratio or a curve measured in this one run",
            "This run measured %s; %s come from earlier runs (the last table says when), "
            "%s. Within a section every figure is a ratio or a curve measured in one run" % (
                ", ".join(chosen), ", ".join(kept),
                "kept as they were written" if spliced else "re-rendered from their saved results"))
    if quick:
        out += ["**This is a --quick smoke run: small sizes and few repeats; do not read the "
                "numbers as measurements.**", ""]
    out += ["## Machine", "", common.table(["", ""], [
        ["CPU", machine["cpu"]], ["cores", cores], ["memory", "%.1f GiB" % machine["memory_gib"]],
        ["OS", machine["os"]], ["Python", machine["python"]], ["NumPy", machine["numpy"]],
        ["numexpr", machine["numexpr"]], ["mpi4py", machine["mpi4py"]],
        ["MPI library", "%s (MPI %s)" % (machine["mpi_library"], machine["mpi_standard"])],
    ]), ""]
    note = ("CPU busy with other work: %s of all cores just before the run, %s at most "
            "between sections (measured while no benchmark ran); 1-minute load average up "
            "to %.1f on %d cores." % (_pct(busy["before"]), _pct(worst_between), max_load, cores))
    if noisy:
        note = ("**The machine was visibly busy during this run** (it is shared): " + note +
                " Timings carry that noise; the interleaved ratios are less affected than "
                "the absolute times.")
    out += [note, ""]
    out += ["## Headlines", ""] + ["- " + h for s in sections for h in s.headlines] + [""]
    for s in sections:
        out += ["## %s" % s.title, "", s.markdown, ""]
    findings = os.path.join(HERE, "FINDINGS.md")
    if os.path.exists(findings):
        with open(findings) as f:
            out += [f.read().strip(), ""]
    measured = measured or {k: {"at": started, "seconds": v} for k, v in timings.items()}
    out += ["## Time per section", "", common.table(["section", "seconds", "measured (UTC)"], [
        [k, "%.0f" % measured[k]["seconds"] if measured[k].get("seconds") else "-", (measured[k].get("when") or _utc(measured[k]["at"]))
         + (" (--quick)" if measured[k].get("quick") else "")]
        for k in SECTIONS if k in measured]), ""]
    return "\n".join(out).replace("\n\n\n", "\n\n")


if __name__ == "__main__":
    sys.exit(main())
