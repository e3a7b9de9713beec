"""psgd on a PyTorch model against torch's DistributedDataParallel (the peer).

The MNIST-1D CNN of examples/torch_mnist1d.py, the same data shards, Adam
2e-3, minibatch 32 per rank, one torch thread per rank, on np 2 and 4:

- DDP: gloo process group initialised from the environment on 127.0.0.1
  (bucketed gradient allreduce overlapped with backward);
- psgd syncgrad through psgd.torch (one Allreduce of the flat .grad buffer
  after backward), which is the same math as DDP;
- psgd bmuf and easgd (4 minibatches per sync, their defaults): model
  averaging, compared by the training time they need to reach 90% held-out.

Each epoch's training is timed between barriers (the slowest rank); the
held-out evaluation after it (rank 0; for easgd the center, after the
epoch's round) is not timed. The runs are interleaved per np.
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MODES = ("ddp", "syncgrad", "bmuf", "easgd")
BLOCK_MODES = ("bmuf", "sod", "easgd")     # a sync every --blocks minibatches
TARGET = 0.90


def _model_factory():
    sys.path.insert(0, os.path.join(common.ROOT, "examples"))
    from torch_mnist1d import accuracy, mnist1d_cnn
    return mnist1d_cnn, accuracy


def child(argv):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from mpi4py import MPI
    import psgd.torch
    from psgd.data import load_mnist1d, shard_range
    p = common.child_args()
    p.add_argument("--mode", choices=MODES + ("sod",), required=True)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--hidden", type=int, default=256, help="the FC layer's width")
    p.add_argument("--stop-at", type=float, default=None,
                   help="end after the first epoch at this held-out accuracy")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    torch.manual_seed(777)
    mnist1d_cnn, accuracy = _model_factory()
    data = load_mnist1d()
    d = {k: torch.from_numpy(getattr(data, k)) for k in ("x_train", "y_train", "x_test", "y_test")}
    model = mnist1d_cnn(hidden=args.hidden)
    if args.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://", rank=comm.rank,
                                world_size=comm.size)
        trained = torch.nn.parallel.DistributedDataParallel(model)
        sync, workers, k = None, comm.size, comm.rank
    else:
        trained = model
        sync = psgd.torch.create(args.mode, model, comm=comm)
        workers, k = sync.N, comm.rank - (comm.size - sync.N)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    lo, hi = shard_range(len(d["y_train"]), max(k, 0), workers)
    steps = len(d["y_train"]) // workers // args.batch
    epoch_s, acc = [], []
    for epoch in range(args.epochs):
        comm.Barrier()
        start = time.perf_counter()
        if sync is not None and sync.role == "server":
            if epoch:
                sync.begin_round()
            sync.run()
        else:
            if sync is not None and epoch:
                sync.begin_round()
            order = lo + torch.randperm(hi - lo, generator=torch.Generator().manual_seed(
                1000 * epoch + k))
            model.train()
            n = 0
            for i in range(steps):
                batch = order[i * args.batch:(i + 1) * args.batch]
                opt.zero_grad()
                F.cross_entropy(trained(d["x_train"][batch]), d["y_train"][batch]).backward()
                n += len(batch)
                if args.mode == "syncgrad":
                    sync.synchronize(n)
                    n = 0
                opt.step()
                if args.mode in BLOCK_MODES and (i + 1) % args.blocks == 0:
                    sync.synchronize(n, optimizer=opt)
                    n = 0
            if sync is not None:
                sync.stop(n, optimizer=opt)
        took = np.array([time.perf_counter() - start])
        comm.Allreduce(MPI.IN_PLACE, took, op=MPI.MAX)
        epoch_s.append(float(took[0]))
        if comm.rank == 0:
            acc.append(accuracy(model, d["x_test"], d["y_test"]))
        if args.stop_at is not None and comm.bcast(comm.rank == 0 and acc[-1] >= args.stop_at):
            break
    if args.mode == "ddp":
        torch.distributed.destroy_process_group()
    if comm.rank == 0:
        with open(args.out, "w") as f:
            json.dump({"mode": args.mode, "np": comm.size, "epochs": args.epochs,
                       "parameters": sum(p.numel() for p in model.parameters()),
                       "samples": steps * args.batch * workers,
                       "epoch_s": epoch_s, "accuracy": acc, "torch": torch.__version__}, f)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(quick=False):
    try:
        import torch  # noqa: F401
    except ImportError:
        return common.Section("PyTorch: psgd against DistributedDataParallel",
                              "Skipped: torch is not installed (`pip install -e '.[torch]'`).",
                              ["torch vs DDP: skipped, no torch"])
    epochs = 2 if quick else 30
    nps = (2,) if quick else (2, 4)
    results, errors = [], {}
    for np_ in nps:
        for mode in MODES:
            out = common.result_path("torch_ddp_%s_np%d.json" % (mode, np_))
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": _free_port(),
                   "GLOO_SOCKET_IFNAME": "lo", "PSGD_BACKEND": "numpy"}
            try:
                results.append(common.run_child("torch_ddp.py", np_, out,
                                                ["--mode", mode, "--epochs", epochs],
                                                timeout=1200, env=env, pin_blas=True))
            except RuntimeError as exc:
                errors["%s np %d" % (mode, np_)] = common.error_line(exc)
    data = {"epochs": epochs, "results": results, "errors": errors, "target": TARGET}
    common.save_json("torch_ddp.json", data)
    return report(data)


def rerender():
    return report(common.load_json("torch_ddp.json"))


def time_to(r, target):
    """Training seconds until the first epoch at or above `target`, or None."""
    total = 0.0
    for s, a in zip(r["epoch_s"], r["accuracy"]):
        total += s
        if a >= target:
            return total
    return None


def report(data):
    by = {(r["mode"], r["np"]): r for r in data["results"]}
    target = data["target"]
    rows, heads = [], []
    for np_ in sorted({r["np"] for r in data["results"]}):
        ddp = by.get(("ddp", np_))
        for mode in MODES:
            r = by.get((mode, np_))
            if r is None:
                continue
            per_epoch = common.median(r["epoch_s"])
            ratio = per_epoch / common.median(ddp["epoch_s"]) if ddp else float("nan")
            reach = time_to(r, target)
            rows.append([np_, "DDP (gloo)" if mode == "ddp" else "psgd " + mode,
                         "%.3f s" % per_epoch, "%.2fx" % ratio, "%.1f%%" % (100 * r["accuracy"][-1]),
                         "%.1f s" % reach if reach is not None else "not reached"])
        if ddp and ("syncgrad", np_) in by:
            heads.append("np %d: psgd syncgrad %.2fx DDP's time per epoch" % (
                np_, common.median(by[("syncgrad", np_)]["epoch_s"]) /
                common.median(ddp["epoch_s"])))
    md = ["The MNIST-1D CNN of `examples/torch_mnist1d.py` in PyTorch (%s epochs, minibatch "
          "32 per rank, Adam 2e-3, one torch thread per rank), psgd through `psgd.torch` "
          "against `torch.nn.parallel.DistributedDataParallel` on gloo (127.0.0.1). Time per "
          "epoch: median over epochs of the slowest rank's training time (evaluation not "
          "counted); ratio: against DDP at the same np. `time to %d%%`: training seconds "
          "until the held-out accuracy (rank 0's model; easgd: the center) first reaches "
          "%d%%." % (data["epochs"], 100 * target, 100 * target), "",
          common.table(["np", "run", "time per epoch", "vs DDP", "final held-out",
                        "time to %d%%" % (100 * target)], rows), ""]
    for what, err in data.get("errors", {}).items():
        md.append("- %s did not run: `%s`" % (what, err))
    return common.Section("PyTorch: psgd against DistributedDataParallel", "\n".join(md),
                          heads, data)


if __name__ == "__main__":
    common.script_main(run, child)
