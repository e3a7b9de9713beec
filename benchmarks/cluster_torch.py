"""PyTorch across hosts (cluster regime): psgd.torch against DDP (gloo) on
namespace hosts at 1 Gb/s, and end to end with a model big enough that the
link matters.

The child of torch_ddp.py (MNIST-1D CNN, Adam 2e-3, minibatch 32 per rank,
one torch thread per rank; each epoch timed between barriers, the held-out
evaluation after it not timed), launched across the hosts; DDP's gloo meets
at h0 over the hosts' eth0.

- the same CNN as the torch_ddp section, 2 hosts x 1 and 2 hosts x 2 ranks;
- end to end: the CNN with a WIDE fully connected layer (0.71M parameters),
  2 ranks on 1 host (shared memory) against 2 ranks on 2 hosts (the link),
  each run ending at the first epoch at 90% held-out accuracy: samples per
  second and training time to 90% (why not 5-10M parameters: FINDINGS.md).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
import common  # noqa: E402
import torch_ddp  # noqa: E402

RATE = "1gbit"
SMALL_MODES = ("ddp", "syncgrad", "bmuf", "sod", "easgd")
WIDE_MODES = ("ddp", "syncgrad", "bmuf", "sod")     # easgd on 2 ranks is 1 worker
WIDE = 4096           # FC width: 160 x 4096 + 4096 x 10 + the convolutions = 0.71M
TARGET = torch_ddp.TARGET
TITLE = "Across hosts: psgd.torch against DDP, and end to end"


def _job(placement, mode, hidden, epochs, port):
    out = common.result_path("cluster_torch_child.json")
    env = {"MASTER_ADDR": "198.18.0.10", "MASTER_PORT": port, "GLOO_SOCKET_IFNAME": "eth0",
           "PSGD_BACKEND": "numpy"}
    load = common.load_average()[0]
    data = cluster.run_child("torch_ddp.py", placement, out,
                             ["--mode", mode, "--epochs", epochs, "--hidden", hidden,
                              "--stop-at", TARGET], timeout=1200, env=env)
    data.update(hosts=len(placement), per_host=placement[0][1], hidden=hidden,
                load=[load, common.load_average()[0]])
    print("   %s %s %d x %d done" % (mode, hidden, len(placement), placement[0][1]), flush=True)
    return data


def run(quick=False):
    why = cluster.why_not()
    if why:
        return cluster.skipped(TITLE, why)
    try:
        import torch  # noqa: F401
    except ImportError:
        return cluster.skipped(TITLE, "torch is not installed")
    small_epochs, wide_epochs = (2, 2) if quick else (25, 12)
    wide = 1024 if quick else WIDE
    small, e2e, port = [], [], 29500
    with cluster.hosts(2, RATE):
        # interleaved: each mode's layouts one after the other
        for mode in SMALL_MODES:
            for count, per_host in cluster.LAYOUTS:
                port += 1
                small.append(_job(cluster.layout(count, per_host), mode, 256, small_epochs,
                                  port))
        for mode in WIDE_MODES:
            for placement in (cluster.layout(1, 2), cluster.layout(2, 1)):
                port += 1
                e2e.append(_job(placement, mode, wide, wide_epochs, port))
    data = {"small": small, "e2e": e2e, "rate": RATE, "target": TARGET, "quick": quick}
    common.save_json("cluster_torch.json", data)
    return report(data)


def rerender():
    return report(common.load_json("cluster_torch.json"))


def _name(mode):
    return "DDP (gloo)" if mode == "ddp" else "psgd " + mode


def _reach(r):
    t = torch_ddp.time_to(r, TARGET)
    return "%.1f s (%d epochs)" % (t, next(i + 1 for i, a in enumerate(r["accuracy"])
                                              if a >= TARGET)) if t is not None else \
        "not in %d epochs" % len(r["accuracy"])


def report(data):
    rows, heads = [], []
    for layout in sorted({(r["hosts"], r["per_host"]) for r in data["small"]}):
        runs = {r["mode"]: r for r in data["small"] if (r["hosts"], r["per_host"]) == layout}
        ddp = runs.get("ddp")
        for mode, r in runs.items():
            per_epoch = common.median(r["epoch_s"])
            rows.append(["%d x %d" % layout, _name(mode), "%.3f s" % per_epoch,
                         "%.2fx" % (per_epoch / common.median(ddp["epoch_s"])) if ddp else "-",
                         "%.1f%%" % (100 * r["accuracy"][-1]), _reach(r),
                         "%.1f-%.1f" % tuple(r["load"])])
    e2e_rows = []
    by = {(r["mode"], r["hosts"]): r for r in data["e2e"]}
    for mode in WIDE_MODES:
        for hosts_ in (1, 2):
            r = by.get((mode, hosts_))
            if r is None:
                continue
            rate = r["samples"] / common.median(r["epoch_s"])
            one = by.get((mode, 1))
            e2e_rows.append([mode if mode != "ddp" else "DDP (gloo)",
                             "1 host x 2" if hosts_ == 1 else "2 hosts x 1", "%.0f" % rate,
                             "%.2fx" % (rate / (one["samples"] / common.median(one["epoch_s"])))
                             if one else "-", "%.1f%%" % (100 * max(r["accuracy"])), _reach(r),
                             "%.1f-%.1f" % tuple(r["load"])])
        r2 = by.get((mode, 2))
        t = torch_ddp.time_to(r2, TARGET) if r2 else None
        if t is not None:
            heads.append("end to end across 2 hosts at %s (%.1fM parameters): %s reaches "
                         "%d%% in %.1f s" % (data["rate"], r2["parameters"] / 1e6, _name(mode),
                                             100 * TARGET, t))
    params = data["e2e"][0]["parameters"] if data["e2e"] else 0
    md = ["The MNIST-1D CNN of `examples/torch_mnist1d.py` (the PyTorch section's model, "
          "the child of `torch_ddp.py`) across namespace hosts with %s links: psgd through "
          "`psgd.torch` against `DistributedDataParallel` on gloo (meeting at h0, over the "
          "hosts' eth0). Each run ends at its first epoch at %d%% held-out accuracy (rank "
          "0's model; easgd: the center) or after its epoch budget. psgd's algorithms take "
          "psgd.torch's options and blocks, the trainer's by N (psgd/algorithms/by_n.py: "
          "bmuf keeps Adam's state and syncs every 4 steps, sod's outer rate is 0.7 "
          "min(1, N/4) and it syncs every 16); across hosts syncgrad sums the hidden layer "
          "through its rows (psgd/torch_factors.py). Time per epoch: median "
          "of the slowest rank's training time; against DDP in the same layout. `load`: "
          "the 1-minute load average before and after the run." % (
              data["rate"], 100 * TARGET), "", cluster.NOTE, "",
          common.table(["hosts x ranks", "run", "time per epoch", "vs DDP", "final held-out",
                        "time to %d%%" % (100 * TARGET), "load"], rows), "",
          "End to end: the same CNN with a %d-wide fully connected layer (%.1fM parameters, "
          "so a sync moves %s), on 2 ranks: both on one host (shared memory) against one "
          "on each of 2 hosts (the %s link). Samples per second: the training samples of "
          "an epoch over its median time; `vs 1 host`: that rate against the same run "
          "on 1 host. Both layouts have 2 ranks on the same 2 cores, so only the link "
          "differs." % (data["e2e"][0]["hidden"] if data["e2e"] else 0, params / 1e6,
                        common.fmt_bytes(4 * params), data["rate"]), "",
          common.table(["run", "layout", "samples/s", "vs 1 host", "best held-out",
                        "time to %d%%" % (100 * TARGET), "load"], e2e_rows), ""]
    return common.Section(TITLE, "\n".join(md), heads, data)


if __name__ == "__main__":
    common.script_main(run)
