"""What recording costs: `make demo`'s job (easgd, the default model, np 5)
with its epochs taking turns, in one job, between no recorder at all (the
hooks' one check), the attribution's recorder (every run's default: the
straggler line) and the whole --timeline. Turns within one job cancel the
load of a shared machine that separate jobs would measure instead.

    .venv/bin/python benchmarks/timeline_cost.py [--np 5] [--epochs 31]

Prints the median epoch time of each state and its ratio to no recorder,
and what the hooks of one sync cost on their own (timed in a loop), times
the syncs of an epoch, as a share of the epoch: the bound that epoch times
on a shared machine are too noisy to show. Each epoch's fold (one gather of
its spans to rank 0) runs in every state.
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

STATES = ("off", "attribution", "timeline")


def child(argv):
    import psgd.worker
    from psgd import trace
    from psgd.train import timeline
    from mpi4py import MPI
    p = common.child_args()
    p.add_argument("--epochs", type=int, default=31)
    args = p.parse_args(argv)
    folder = tempfile.mkdtemp() if MPI.COMM_WORLD.Get_rank() == 0 else None
    folder = MPI.COMM_WORLD.bcast(folder)
    metrics = os.path.join(folder, "m.jsonl")
    turn = {"epoch": 0}
    started = timeline.Timeline.next_epoch

    def next_epoch(self):
        # epoch e runs in state e % 3 (epoch 0 warms up in "off")
        state = STATES[turn["epoch"] % len(STATES)]
        turn["epoch"] += 1
        self.recorder.detail = state == "timeline"
        trace.install(None if state == "off" else self.recorder)
        started(self)
    timeline.Timeline.next_epoch = next_epoch
    code = psgd.worker.main(["--algo", "easgd", "--epochs", str(args.epochs), "--quiet",
                             "--metrics", metrics, "--timeline", os.path.join(folder, "t.json")])
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(metrics) as f:
            rows = [json.loads(line) for line in f]
        walls = [r["wall_seconds"] for r in rows]
        epochs = {s: [] for s in STATES}
        for e in range(1, len(walls)):
            epochs[STATES[e % len(STATES)]].append(walls[e] - walls[e - 1])
        with open(args.out, "w") as f:
            per_epoch = (rows[-1]["syncs"] - rows[0]["syncs"]) / max(len(rows) - 1, 1)
            json.dump(dict(epochs, syncs_per_epoch=per_epoch,
                           hooks_s={d: hook_seconds(d) for d in ("attribution", "timeline")}),
                      f)
    sys.exit(code)


def hook_seconds(state, n=200000):
    """Seconds per sync of what a collective sync's hooks do in `state`."""
    import time
    from psgd import trace
    rec = trace.Recorder(detail=state == "timeline")
    rec.resume()
    started = time.perf_counter()
    for k in range(n):
        start = trace.now()
        counted = trace.now()
        rec.part("count", start, counted)
        end = trace.now()
        rec.part("exchange + update", counted, end)
        rec.sync(start, end, k, collective=True)
        if k % 1000 == 999:
            rec.take()
    return (time.perf_counter() - started) / n


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=5)
    p.add_argument("--epochs", type=int, default=31)
    args = p.parse_args()
    out = common.result_path("timeline_cost.json")
    data = common.run_child("timeline_cost.py", args.np, out, ["--epochs", str(args.epochs)])
    base = common.median(data["off"])
    for state in STATES:
        print("%-12s median epoch %s over %d epochs, %.3fx no recorder" % (
            state, common.fmt_time(common.median(data[state])), len(data[state]),
            common.median(data[state]) / base))
    for state, seconds in data["hooks_s"].items():
        print("%-12s hooks %s per sync x %g syncs per epoch (per worker) = %.4f%% of an epoch"
              % (state, common.fmt_time(seconds), data["syncs_per_epoch"],
                 100 * seconds * data["syncs_per_epoch"] / base))


if __name__ == "__main__":
    if "--child" in sys.argv:
        common.child_main(child, sys.argv[1:])
    else:
        main()
