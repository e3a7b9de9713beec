"""psgd on a PyTorch model against torch's DistributedDataParallel (the peer).

The MNIST-1D CNN of examples/torch_mnist1d.py ("cnn") and the same CNN
with its hidden layer widened to 32768 units ("wide", 5.6M parameters,
FC 160 -> 32768 -> 10: link-bound across hosts), the same data shards,
Adam 2e-3, minibatch 32 per rank, one torch thread per rank, on np 2 and 4
on this host and, where namespace hosts can be made (root), on two hosts
linked at 1 Gb/s (bin/psgd-local-cluster, ranks split evenly):

- DDP: gloo, bucketed gradient allreduce overlapped with backward;
- psgd syncgrad through psgd.torch.DistributedOptimizer (buckets summed on
  psgd's transfer thread while backward runs): the same math as DDP;
- psgd syncgrad as before DistributedOptimizer ("syncgrad_late"): the
  user's loop calls sync.synchronize(batch) after backward, so every sum
  starts then and nothing hides under backward;
- psgd bmuf and easgd (psgd.torch's options and block, the trainer's by N;
  --contract-defaults: psgd.create's own, a sync every 4 steps): model averaging;
- on request (PSGD_BENCH_TORCH_MODES), psgd syncgrad with its buckets
  compressed ("syncgrad_fp16", "syncgrad_1bit": compression from the first step).

The runs are interleaved: each repetition runs every mode once per
setting, the modes' order rotating from one repetition to the next, and
the machine's load average is recorded beside each run. Per epoch the
training is timed between barriers (the slowest rank); the held-out
evaluation is not timed. Per step (median over the last rank's steps of
the last epoch): forward, backward as run, the optimizer's step, and psgd's
wait for the sums (DDP waits inside its backward). Before training each
run times a few forward/backward passes that send nothing (DDP's and
psgd's no_sync), the compute alone, and psgd syncgrad times its sums alone
(no backward under them) after training. Exposed communication = backward
as run + wait - backward alone; hidden = sums alone - exposed.
"""
import json
import math
import os
import socket
import subprocess
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch_ddp_report  # noqa: E402

MODES = torch_ddp_report.MODES[:5]        # run by default; PSGD_BENCH_TORCH_MODES: others
TARGET = 0.90                             # held-out accuracy of cluster_torch's time-to
MODELS = {"cnn": 256, "wide": 32768}      # the hidden layer's width
CALIBRATION_STEPS = 8
CLUSTER = "torch"                         # PSGD_LOCAL_CLUSTER of the cross-host runs
TOOL = os.path.join(common.ROOT, "bin", "psgd-local-cluster")


def _model_factory():
    sys.path.insert(0, os.path.join(common.ROOT, "examples"))
    from torch_mnist1d import accuracy, mnist1d_cnn
    return mnist1d_cnn, accuracy


class Clock:
    """Seconds of each phase of the steps of one epoch."""

    def __init__(self):
        self.phases = {}

    def lap(self, phase, start):
        now = time.perf_counter()
        self.phases.setdefault(phase, []).append(now - start)
        return now

    def medians(self):
        return {k: common.median(v) for k, v in self.phases.items()}

    def totals(self):
        return {k: sum(v) for k, v in self.phases.items()}

    def series(self):
        return dict(self.phases)


def child(argv):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from mpi4py import MPI
    import psgd.torch
    from psgd.data import load_mnist1d, shard_range
    p = common.child_args()
    p.add_argument("--mode", choices=torch_ddp_report.MODES + ("sod", "sod_1bit", "asgd", "masgd"), required=True)
    p.add_argument("--model", choices=sorted(MODELS), default="cnn")
    p.add_argument("--hidden", type=int, default=None,
                   help="the FC layer's width (default: --model's)")
    p.add_argument("--stop-at", type=float, default=None,
                   help="end after the first epoch at this held-out accuracy")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--blocks", type=int, default=None,
                   help="steps per sync (default: psgd.torch's, the trainer's by N)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--contract-defaults", action="store_true",
                   help="psgd modes but syncgrad: psgd.create's own options "
                        "(docs/algorithms.md: bmuf clears Adam's moments every sync, sod's "
                        "outer rate 0.7) and a sync every 4 steps, instead of psgd.torch's "
                        "(the trainer's by N, psgd/algorithms/by_n.py)")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    torch.set_num_threads(1)
    torch.manual_seed(777)
    mnist1d_cnn, accuracy = _model_factory()
    data = load_mnist1d()
    d = {k: torch.from_numpy(getattr(data, k)) for k in ("x_train", "y_train", "x_test", "y_test")}
    model = mnist1d_cnn(hidden=args.hidden or MODELS[args.model])
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sync = None
    if args.mode.startswith("ddp"):
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://", rank=comm.rank,
                                world_size=comm.size)
        trained = torch.nn.parallel.DistributedDataParallel(model)
        if args.mode == "ddp_fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            trained.register_comm_hook(None, default_hooks.fp16_compress_hook)
        workers, k, quiet = comm.size, comm.rank, trained.no_sync
    else:
        trained = model
        kind = torch_ddp_report.COMPRESSION.get(args.mode)
        grads = args.mode.startswith("syncgrad")
        # syncgrad_1bit_local: each rank's Adam, at the trainer's rate x sqrt(N), its steps
        # summed (bmuf_1bit, sod_1bit: the momentum shares are psgd.torch's own with 1bit)
        local = args.mode == "syncgrad_1bit_local"
        shares = {"compression_momentum": "local"} if local else {}
        if local:
            for group in opt.param_groups:
                group["lr"] *= math.sqrt(comm.size)
        if args.contract_defaults and not grads:
            shares = _contract(args.mode.split("_")[0], comm.size, kind)
            args.blocks = args.blocks or 4
        if args.mode == "syncgrad_dense":
            shares["factors"] = False
        sync = psgd.torch.create("syncgrad" if grads else args.mode.split("_")[0], model,
                                 comm=comm, **({"compression": kind} if kind else {}), **shares)
        workers, k = sync.N, comm.rank - (comm.size - sync.N)
        if sync.role != "server" and args.mode != "syncgrad_late":
            opt = psgd.torch.DistributedOptimizer(
                opt, sync, samples=args.batch, every=None if grads else args.blocks)
        quiet = _nothing if not grads else (
            sync.no_sync if args.mode == "syncgrad_late" else opt.no_sync)
    serving = sync is not None and sync.role == "server"
    lo, hi = shard_range(len(d["y_train"]), max(k, 0), workers)
    steps = len(d["y_train"]) // workers // args.batch

    def loss_of(batch):
        return F.cross_entropy(trained(d["x_train"][batch]), d["y_train"][batch])

    alone = Clock()         # compute alone: passes that send nothing
    if not serving:
        for i in range(CALIBRATION_STEPS):
            batch = lo + torch.arange(i * args.batch, (i + 1) * args.batch)
            with quiet():
                t = time.perf_counter()
                loss = loss_of(batch)
                t = alone.lap("forward", t)
                loss.backward()
                alone.lap("backward", t)
            opt.zero_grad()
    epoch_s, acc, clock = [], [], Clock()
    for epoch in range(args.epochs):
        comm.Barrier()
        start = time.perf_counter()
        if sync is not None and epoch:
            sync.begin_round()
        if serving:
            sync.run()
        else:
            order = lo + torch.randperm(hi - lo, generator=torch.Generator().manual_seed(
                1000 * epoch + k))
            model.train()
            clock = Clock()
            for i in range(steps):
                batch = order[i * args.batch:(i + 1) * args.batch]
                t = time.perf_counter()
                opt.zero_grad()
                loss = loss_of(batch)
                t = clock.lap("forward", t)
                loss.backward()
                t = clock.lap("backward", t)
                if args.mode == "syncgrad_1bit_local":     # Adam's step, then the sums
                    sync.synchronize(args.batch, optimizer=opt)
                    t = clock.lap("wait", t)
                elif args.mode.startswith("syncgrad"):
                    sync.synchronize(args.batch)   # what opt.step() does first, timed apart
                    t = clock.lap("wait", t)
                    getattr(opt, "local_step", opt.step)()
                else:
                    opt.step()
                clock.lap("step", t)
            if args.mode == "syncgrad_late":
                sync.stop(0, optimizer=opt)
            elif sync is not None:
                opt.stop()
        took = np.array([time.perf_counter() - start])
        comm.Allreduce(MPI.IN_PLACE, took, op=MPI.MAX)
        epoch_s.append(float(took[0]))
        if comm.rank == 0:
            acc.append(accuracy(model, d["x_test"], d["y_test"]))
        if args.stop_at is not None and comm.bcast(comm.rank == 0 and acc[-1] >= args.stop_at):
            break
    sums = _sums_alone(comm, sync) if args.mode.startswith("syncgrad") else None
    # the last rank always trains (rank 0 serves under easgd): its steps are reported
    last = comm.size - 1
    steps_of_last = comm.bcast((clock.medians(), alone.medians(), clock.totals(), clock.series())
                               if comm.rank == last else None, root=last)
    if args.mode.startswith("ddp"):
        torch.distributed.destroy_process_group()
    if comm.rank == 0:
        with open(args.out, "w") as f:
            json.dump({"mode": args.mode, "model": args.model, "np": comm.size,
                       "epochs": args.epochs, "epoch_s": epoch_s, "accuracy": acc,
                       "parameters": sum(p.numel() for p in model.parameters()),
                       "samples": steps * args.batch * workers,
                       "step": steps_of_last[0], "alone": steps_of_last[1], "sums_alone": sums,
                       "epoch_phases": steps_of_last[2], "series": steps_of_last[3],
                       "torch": torch.__version__}, f)


def time_to(r, target):
    """Training seconds until the first epoch at or above `target`, or None."""
    total = 0.0
    for s, a in zip(r["epoch_s"], r["accuracy"]):
        total += s
        if a >= target:
            return total
    return None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NO_STEP = types.SimpleNamespace(step=lambda: None)


def _sums_alone(comm, sync, repeats=8):
    """Median seconds of syncgrad's bucketed sums with nothing under them."""
    sync.begin_round()
    took = []
    for _ in range(repeats):
        comm.Barrier()
        t = time.perf_counter()
        sync.synchronize(1, optimizer=_NO_STEP)     # local steps: the sums of 0
        took.append(time.perf_counter() - t)
    sync.stop(0)
    return common.median(took)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


def _tool(*args, check=True):
    env = dict(os.environ, PSGD_LOCAL_CLUSTER=CLUSTER)
    r = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True,
                       env=env, timeout=180, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise RuntimeError("psgd-local-cluster %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def cluster_problem():
    """None where two namespace hosts can be made here, else why not."""
    if os.environ.get("PSGD_BENCH_NO_CLUSTER"):
        return "PSGD_BENCH_NO_CLUSTER is set"
    if sys.platform != "linux" or os.geteuid() != 0:
        return "namespace hosts need root on Linux"
    return None


def settings(quick, hosts):
    """[(hosts, np, model)] of the runs, in the order they are interleaved."""
    nps = (2,) if quick else (2, 4)
    models = ("cnn", "wide")
    return [(h, n, m) for h in hosts for n in nps for m in models]


def _contract(algo, size, kind):
    """psgd.create's own value of every option psgd.torch would choose by N."""
    from psgd.algorithms import REGISTRY, by_n
    cls = REGISTRY[algo]
    N = cls.workers(size)
    chosen = by_n.options(algo, N, {"compression": kind})
    return {k: cls.OPTIONS[k].resolve(k, None, N) for k in chosen}


def launch(setting, mode, epochs, out, flags=(), wide_epochs=1):
    """One child run of `setting`; `flags`: more of the child's flags."""
    hosts, np_, model = setting
    env = {"PSGD_BACKEND": "numpy", "MASTER_PORT": _free_port(), "OMP_NUM_THREADS": "1"}
    launcher = None
    if hosts == 1:
        env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
    else:
        env.update(MASTER_ADDR="198.18.0.10", GLOO_SOCKET_IFNAME="eth0",
                   PSGD_LOCAL_CLUSTER=CLUSTER, MPIEXEC=common.mpirun_path())
        launcher = [sys.executable, TOOL, "mpirun", "-hosts",
                    ",".join("h%d:%d" % (i, np_ // hosts) for i in range(hosts))]
    epochs = epochs if model == "cnn" else wide_epochs   # the wide CNN: ~100x an epoch's time
    return common.run_child("torch_ddp.py", np_, out, ["--mode", mode, "--model", model,
                                                       "--epochs", epochs, *flags],
                            timeout=1800, env=env, pin_blas=True, launcher=launcher)


def run(quick=False):
    try:
        import torch  # noqa: F401
    except ImportError:
        return common.Section(torch_ddp_report.TITLE,
                              "Skipped: torch is not installed (`pip install -e '.[torch]'`).",
                              ["torch vs DDP: skipped, no torch"])
    reps = 1 if quick else int(os.environ.get("PSGD_BENCH_TORCH_REPS", "3"))
    modes = tuple(os.environ.get("PSGD_BENCH_TORCH_MODES", ",".join(MODES)).split(","))
    unknown = sorted(set(modes) - set(torch_ddp_report.MODES))
    if unknown:
        raise SystemExit("PSGD_BENCH_TORCH_MODES: unknown mode(s) %s; valid: %s" % (
            ", ".join(unknown), ", ".join(torch_ddp_report.MODES)))
    epochs = 1 if quick else 3
    why_not = cluster_problem()
    hosts = (1,) if quick or why_not else (1, 2)
    results, errors = [], {}
    if 2 in hosts:
        _tool("down", check=False)
        _tool("up", "2", "--rate", "1gbit")
    try:
        for rep in range(reps):
            for setting in settings(quick, hosts):
                shift = rep % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    name = "%s np %d %s, %d host%s" % (mode, setting[1], setting[2],
                                                        setting[0], "s"[:setting[0] > 1])
                    out = common.result_path("torch_ddp_%s_%s_np%d_h%d.json" % (
                        mode, setting[2], setting[1], setting[0]))
                    before = _loadavg()
                    try:
                        r = launch(setting, mode, epochs, out)
                    except RuntimeError as exc:
                        errors[name] = common.error_line(exc)
                        continue
                    r.update(rep=rep, hosts=setting[0], load=[before, _loadavg()])
                    results.append(r)
    finally:
        if 2 in hosts:
            _tool("down", check=False)
    data = {"epochs": epochs, "reps": reps, "results": results, "errors": errors,
            "no_cluster": why_not}
    common.save_json("torch_ddp.json", data)
    return torch_ddp_report.report(data)


def rerender():
    return torch_ddp_report.report(common.load_json("torch_ddp.json"))


if __name__ == "__main__":
    common.script_main(run, child)
