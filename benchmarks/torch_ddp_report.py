"""The Markdown of benchmarks/torch_ddp.py's results: per setting (hosts,
np, model) and mode, the median over repetitions with its spread, the
ratio to DDP taken within each repetition (the runs beside each other),
and the per-step breakdown."""
import common

TITLE = "PyTorch: psgd against DistributedDataParallel"
MODES = ("ddp", "syncgrad", "syncgrad_late", "bmuf", "easgd", "syncgrad_fp16", "syncgrad_1bit",
         "ddp_fp16", "bmuf_1bit", "syncgrad_1bit_local", "syncgrad_dense")
NAMES = {"ddp": "DDP (gloo)", "syncgrad": "psgd syncgrad", "syncgrad_late":
         "psgd syncgrad, sums after backward", "bmuf": "psgd bmuf", "easgd": "psgd easgd",
         "syncgrad_fp16": "psgd syncgrad, fp16 buckets",
         "syncgrad_1bit": "psgd syncgrad, 1bit buckets",
         "ddp_fp16": "DDP (gloo), fp16 compress hook", "bmuf_1bit": "psgd bmuf, 1bit",
         "sod": "psgd sod", "sod_1bit": "psgd sod, 1bit",
         "syncgrad_1bit_local": "psgd syncgrad, 1bit, each rank's Adam (lr x sqrt(N))",
         "syncgrad_dense": "psgd syncgrad, every layer summed (factors=False)"}
COMPRESSION = {"syncgrad_fp16": "fp16", "syncgrad_1bit": "1bit",      # the mode's compression=
               "bmuf_1bit": "1bit", "sod_1bit": "1bit", "syncgrad_1bit_local": "1bit"}


def spread(values, fmt):
    """"median [min-max]" of `values` in format `fmt`."""
    if not values:
        return "-"
    med = fmt % common.median(values)
    return med if len(values) == 1 else "%s [%s-%s]" % (med, fmt % min(values),
                                                       fmt % max(values))


def ms(x):
    return "-" if x is None else "%.1f" % (1000 * x)


def breakdown(r):
    """{column: seconds} of one run's median step."""
    step, alone = r.get("step", {}), r.get("alone", {})
    fwd, bwd, wait = step.get("forward"), step.get("backward"), step.get("wait", 0.0)
    out = {"forward": fwd, "backward alone": alone.get("backward"), "backward": bwd,
           "wait": wait if r["mode"].startswith("syncgrad") else None, "step": step.get("step"),
           "exposed": None, "sums alone": r.get("sums_alone"), "hidden": None}
    if bwd is not None and alone.get("backward") is not None and (
            r["mode"] == "ddp" or r["mode"].startswith("syncgrad")):
        out["exposed"] = max(0.0, bwd + wait - alone["backward"])
        if out["sums alone"] is not None:
            out["hidden"] = max(0.0, out["sums alone"] - out["exposed"])
    return out


def report(data):
    results = data["results"]
    groups = sorted({(r.get("hosts", 1), r["np"], r.get("model", "cnn")) for r in results})
    md = [common_text(data), ""]
    if data.get("note"):        # how the figures were taken, when not by `make bench`
        md = ["**%s**" % data["note"], ""] + md
    heads = []
    columns = ["forward", "backward alone", "backward", "wait", "exposed", "sums alone",
               "hidden", "step"]
    for hosts, np_, model in groups:
        runs = [r for r in results if (r.get("hosts", 1), r["np"], r.get("model", "cnn"))
                == (hosts, np_, model)]
        per = {m: [r for r in runs if r["mode"] == m] for m in MODES}
        ddp = {r.get("rep"): common.median(r["epoch_s"]) for r in per["ddp"]}
        rows, steps = [], []
        for mode in MODES:
            rs = per[mode]
            if not rs:
                continue
            epoch = [common.median(r["epoch_s"]) for r in rs]
            ratios = [common.median(r["epoch_s"]) / ddp[r.get("rep")] for r in rs
                      if r.get("rep") in ddp]
            acc = [100 * r["accuracy"][-1] for r in rs if r.get("accuracy")]
            loads = [r["load"][0][0] for r in rs if r.get("load") and r["load"][0]]
            rows.append([NAMES[mode], spread(epoch, "%.2f s"), spread(ratios, "%.2fx"),
                         spread(acc, "%.1f%%"), spread(loads, "%.1f")])
            b = [breakdown(r) for r in rs]
            steps.append([NAMES[mode]] + [ms(_med([x[c] for x in b])) for c in columns])
            if mode == "syncgrad" and ratios:
                heads.append("%s, np %d, %d host%s: psgd syncgrad %s DDP's time per epoch" % (
                    model, np_, hosts, "s"[:hosts > 1], spread(ratios, "%.2fx")))
        params = runs[0].get("parameters")
        md += ["### %s CNN (%s parameters), np %d, %s" % (
                   model, "%.2fM" % (params / 1e6) if params else "?", np_,
                   "one host" if hosts == 1 else "%d namespace hosts at 1 Gb/s" % hosts), "",
               common.table(["run", "time per epoch", "vs DDP", "final held-out",
                             "load (1 min)"], rows), "",
               common.table(["per step, ms"] + columns, steps), ""]
    for what, err in data.get("errors", {}).items():
        md.append("- %s did not run: `%s`" % (what, err))
    if data.get("no_cluster"):
        md.append("- Across hosts: not run (%s)." % data["no_cluster"])
    return common.Section(TITLE, "\n".join(md), heads, data)


def _med(values):
    values = [v for v in values if v is not None]
    return common.median(values) if values else None


def common_text(data):
    return (
        "The MNIST-1D CNN of `examples/torch_mnist1d.py` (`cnn`) and the same CNN with its "
        "hidden layer 32768 wide (`wide`, link-bound across hosts; one epoch), %d epochs, "
        "minibatch 32 "
        "per rank, Adam 2e-3, one torch thread per rank; psgd through "
        "`psgd.torch.DistributedOptimizer` against `DistributedDataParallel` on gloo. %d "
        "repetition(s), interleaved (every mode once per repetition and setting, in an order "
        "that rotates). Time per epoch: the median over epochs of the slowest rank's "
        "training time, then the median over repetitions [min-max]; `vs DDP`: the ratio "
        "within each repetition, median [min-max]; load: the 1-minute load average before "
        "each run. Per step (medians, ms): forward; backward with nothing sent (`alone`) "
        "and as run; psgd's wait for its sums after backward (DDP waits inside its "
        "backward); exposed = backward + wait - backward alone; syncgrad's sums alone, "
        "with no backward under them; hidden = sums alone - exposed; the optimizer's "
        "step (bmuf and easgd: with their sync every 4 steps)."
        % (data["epochs"], data.get("reps", 1)))
