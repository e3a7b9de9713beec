"""The PyTorch section's one link-bound setting on its own: the wide CNN at
np 2 across 2 namespace hosts at 1 Gb/s, DDP against psgd.torch syncgrad
plain and with fp16 and 1bit buckets, repetitions interleaved (rotating
order), rendered as torch_ddp_report renders it. The full section
(torch_ddp.py) runs every model, np and host count; this is what one
measurement of the link-bound case costs (a few minutes).

    python benchmarks/torch_wide_hosts.py [--reps 3]

--setting HOSTS,NP,MODEL measures another of the section's settings the same
way (one host needs no cluster), e.g. --setting 1,2,cnn for the default CNN.

With --stop-at A (and --epochs E, --modes ...), each run trains until its
first epoch at held-out accuracy A (or E epochs), and the report adds the
training time to A: issue 29's time to 90% across hosts, e.g. --modes
ddp,ddp_fp16,syncgrad,bmuf,bmuf_1bit --epochs 25 --stop-at 0.9 --reps 1.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch_ddp  # noqa: E402
import torch_ddp_report  # noqa: E402

MODES = ("ddp", "syncgrad", "syncgrad_fp16", "syncgrad_1bit")
SETTING = (2, 2, "wide")       # hosts, np, model


def launch(mode, epochs, stop_at, out, contract_defaults=False, setting=SETTING):
    """torch_ddp.launch for `setting`, with an epoch budget and a target."""
    flags = (["--stop-at", stop_at] if stop_at is not None else []) + (
        ["--contract-defaults"] if contract_defaults else [])
    return torch_ddp.launch(setting, mode, epochs, out, flags, wide_epochs=epochs)


def time_table(results, targets):
    """Training time to each of `targets` (held-out accuracies) per run."""
    rows = []
    for r in results:
        cells = []
        for target in targets:
            reached = torch_ddp.time_to(r, target)
            cells.append("%.0f s" % reached if reached is not None else "-")
        rows.append([torch_ddp_report.NAMES.get(r["mode"], r["mode"])] + cells + [
            len(r["epoch_s"]), "%.2f s" % common.median(r["epoch_s"]),
            "%.1f%%" % (100 * max(r["accuracy"])),
            "%.1f-%.1f" % (r["load"][0][0], r["load"][1][0])])
    return common.table(["run"] + ["to %d%%" % round(100 * t) for t in targets] + [
        "epochs", "time per epoch", "best held-out", "load"], rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--stop-at", type=float, default=None)
    p.add_argument("--contract-defaults", action="store_true",
                   help="bmuf and sod modes: psgd.create's own options, not psgd.torch's")
    p.add_argument("--setting", default=",".join(map(str, SETTING)),
                   help="HOSTS,NP,MODEL (default %s)" % ",".join(map(str, SETTING)))
    args = p.parse_args()
    modes = tuple(args.modes.split(","))
    hosts, np_, model = args.setting.split(",")
    setting = (int(hosts), int(np_), model)
    hosts = setting[0]
    why = torch_ddp.cluster_problem() if hosts > 1 else None
    if why:
        raise SystemExit("torch_wide_hosts: %s" % why)
    results, errors = [], {}
    if hosts > 1:
        torch_ddp._tool("down", check=False)
        torch_ddp._tool("up", str(hosts), "--rate", "1gbit")
    name = "%s_np%d_h%d" % (model, setting[1], hosts)
    try:
        for rep in range(args.reps):
            shift = rep % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                out = common.result_path("torch_ddp_%s_%s.json" % (mode, name))
                before = torch_ddp._loadavg()
                try:
                    r = launch(mode, args.epochs, args.stop_at, out, args.contract_defaults,
                               setting)
                except RuntimeError as exc:
                    errors[mode] = common.error_line(exc)
                    continue
                r.update(rep=rep, hosts=hosts, load=[before, torch_ddp._loadavg()])
                results.append(r)
                print("  %s rep %d done" % (mode, rep), flush=True)
    finally:
        if hosts > 1:
            torch_ddp._tool("down", check=False)
    data = {"epochs": args.epochs, "reps": args.reps, "results": results, "errors": errors,
            "no_cluster": None, "stop_at": args.stop_at,
            "contract_defaults": args.contract_defaults}
    if args.stop_at is None:
        common.save_json("torch_wide_hosts.json" if setting == SETTING else
                         "torch_%s.json" % name, data)
        print(torch_ddp_report.report(data).markdown)
    else:
        common.save_json("torch_wide_hosts_time_to%s.json" % (
            "_contract" if args.contract_defaults else ""), data)
        print(time_table(results, sorted({0.8, 0.85, args.stop_at})))
    for mode, line in errors.items():
        print("- %s: %s" % (mode, line))


if __name__ == "__main__":
    main()
