"""bin/psgd-elastic's own logic, with a fake MPI launcher in place of mpiexec:
which hosts a restart runs on, with how many ranks, with --resume; the line
each restart logs; what is not restarted (a bad flag, every host gone, fewer
than --min-hosts, --max-restarts reached); its own flags and SLURM's hostlist.
The fake launcher plays a script of job endings and keeps a set of dead hosts
its probes (`true` on one host) fail on."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from launch_util import ROOT

pytestmark = [pytest.mark.timeout(60), pytest.mark.one_mpi]

ELASTIC = os.path.join(ROOT, "bin", "psgd-elastic")
TRAIN = ["--algo", "bmuf", "--epochs", "10", "--checkpoint-dir", "ck"]

FAKE = r'''
import json, os, sys, time
state_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state.json")
state = json.load(open(state_path))
argv = sys.argv[1:]
flag = "-hosts" if "-hosts" in argv else "--host"
hosts = [h.split(":")[0] for h in argv[argv.index(flag) + 1].split(",")]
cmd = argv[argv.index("-n") + 2:]
if cmd == ["true"]:
    sys.exit(1 if hosts[0] in state["dead"] else 0)
with open("calls.jsonl", "a") as f:
    f.write(json.dumps(argv) + "\n")
step = state["script"].pop(0)
json.dump(state, open(state_path, "w"))
for e in range(step.get("from", 1), step.get("epochs", 0) + 1):
    print("LOG (psgd-train[0.1.0]:epoch():trainer.py:258) epoch %d/10: train loss 1.0" % e,
          flush=True)
    if e == step.get("checkpoint"):
        os.makedirs("ck/epoch-%04d" % (e - 1), exist_ok=True)
        with open("ck/LATEST", "w") as f:
            json.dump({"folder": "epoch-%04d" % (e - 1), "size": 4}, f)
if step.get("sleep"):
    time.sleep(step["sleep"])
state["dead"] += step.get("kill", [])
json.dump(state, open(state_path, "w"))
sys.stderr.write(step.get("stderr", ""))
sys.exit(step.get("exit", 0))
'''


def elastic(tmp_path, script, *args, dead=(), env=None, mpi="mpich", timeout=30):
    (tmp_path / "fake.py").write_text(FAKE)
    (tmp_path / "state.json").write_text(json.dumps({"script": script, "dead": list(dead)}))
    cmd = [sys.executable, ELASTIC, "--launcher", "%s %s" % (sys.executable, tmp_path / "fake.py"),
           "--mpi", mpi] + list(args)   # a later --launcher wins
    return subprocess.run(cmd, capture_output=True, text=True, cwd=str(tmp_path), timeout=timeout,
                          env=dict(os.environ, PSGD_PYTHON=sys.executable, **(env or {})),
                          stdin=subprocess.DEVNULL)


def calls(tmp_path):
    path = tmp_path / "calls.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def placement(call):
    return call[call.index("-hosts") + 1], int(call[call.index("-n") + 1])


def own_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("psgd-elastic:")]


def test_a_lost_host_restarts_on_the_survivors_from_the_checkpoint(tmp_path):
    r = elastic(tmp_path, [{"epochs": 6, "checkpoint": 4, "kill": ["h1"], "exit": 137},
                           {"from": 5, "epochs": 10, "exit": 0}],
                "--hosts", "h0:2,h1:2,h2:1", *TRAIN)
    assert r.returncode == 0, r.stderr
    first, second = calls(tmp_path)
    assert placement(first) == ("h0:2,h1:2,h2:1", 5) and "--resume" not in first
    # one rank per slot left, resumed
    assert placement(second) == ("h0:2,h2:1", 3) and second[-1] == "--resume"
    assert second[second.index("-n") + 2:-1] == [sys.executable, "-m", "psgd.worker"] + TRAIN
    restart = own_lines(r.stderr)[0]
    assert restart.startswith("psgd-elastic: restart 1/3: lost host h1 at epoch 7; resuming "
                              "from checkpoint epoch 4 (2 finished epochs redone) on h0:2,h2:1, "
                              "3 ranks (hosts probed in ")
    assert "restart 1: the survivors resumed" in r.stderr
    # the job's own output passes through
    assert "epoch 10/10" in r.stdout


def test_same_ranks_puts_the_lost_hosts_ranks_on_the_survivors(tmp_path):
    r = elastic(tmp_path, [{"epochs": 3, "checkpoint": 2, "kill": ["h1"], "exit": 1},
                           {"exit": 0}],
                "--hosts", "h0:2,h1:2", "--same-ranks", *TRAIN, "--resume")
    assert r.returncode == 0, r.stderr
    first, second = calls(tmp_path)
    assert first.count("--resume") == 1 and second.count("--resume") == 1
    assert placement(second) == ("h0:4", 4)


def test_a_bad_flag_is_not_restarted(tmp_path):
    r = elastic(tmp_path, [{"exit": 2, "stderr": "psgd-train: error: --lr must be > 0\n"},
                           {"exit": 0}], "--hosts", "h0:2,h1:2", *TRAIN, "--lr", "-1")
    assert r.returncode == 2
    assert len(calls(tmp_path)) == 1
    assert own_lines(r.stderr) == ["psgd-elastic: error: the job failed (exit status 2) with "
                                   "every host answering: not a lost host, not restarted"]


def test_a_restart_that_psgd_refuses_is_not_restarted_again(tmp_path):
    """e.g. a psgd whose --resume refuses another rank count: its status 2"""
    r = elastic(tmp_path, [{"epochs": 2, "checkpoint": 2, "kill": ["h1"], "exit": 137},
                           {"exit": 2}, {"exit": 0}], "--hosts", "h0:2,h1:2", *TRAIN)
    assert r.returncode == 2
    assert len(calls(tmp_path)) == 2
    assert own_lines(r.stderr)[-1] == (
        "psgd-elastic: error: the restarted job failed (exit status 2) with every host "
        "answering: not a lost host, not restarted")


def test_every_host_lost_is_one_error_and_the_checkpoint_stays(tmp_path):
    r = elastic(tmp_path, [{"epochs": 5, "checkpoint": 4, "kill": ["h0", "h1"], "exit": 137}],
                "--hosts", "h0:2,h1:2", *TRAIN)
    assert r.returncode == 1
    assert own_lines(r.stderr) == [
        "psgd-elastic: error: lost hosts h0, h1 at epoch 6: 0 hosts left, fewer than "
        "--min-hosts 1; the last checkpoint (epoch 4) is in ck"]
    assert json.loads((tmp_path / "ck" / "LATEST").read_text())["folder"] == "epoch-0003"
    assert len(calls(tmp_path)) == 1


def test_fewer_than_min_hosts_left_is_not_restarted(tmp_path):
    r = elastic(tmp_path, [{"epochs": 1, "kill": ["h2"], "exit": 137}],
                "--hosts", "h0,h1,h2", "--min-hosts", "3", *TRAIN)
    assert r.returncode == 1
    assert own_lines(r.stderr) == [
        "psgd-elastic: error: lost host h2 at epoch 2: 2 hosts left, fewer than --min-hosts 3; "
        "the last checkpoint (none yet) is in ck"]


def test_max_restarts_is_kept(tmp_path):
    r = elastic(tmp_path, [{"epochs": 2, "checkpoint": 2, "kill": ["h2"], "exit": 137},
                           {"from": 3, "epochs": 4, "checkpoint": 4, "kill": ["h1"], "exit": 9}],
                "--hosts", "h0,h1,h2", "--max-restarts", "1", *TRAIN)
    assert r.returncode == 1
    assert len(calls(tmp_path)) == 2
    assert own_lines(r.stderr)[-1] == (
        "psgd-elastic: error: lost host h1 at epoch 5: --max-restarts 1 reached; the last "
        "checkpoint (epoch 4) is in ck")


def test_open_mpi_placement(tmp_path):
    r = elastic(tmp_path, [{"exit": 0}], "--hosts", "h0:2,h1:2", *TRAIN, mpi="openmpi")
    assert r.returncode == 0, r.stderr
    assert calls(tmp_path)[0][:6] == ["--host", "h0:2,h1:2", "--map-by", "slot", "-n", "4"]


def test_open_mpi_s_exit_status_0_after_a_lost_host_is_a_loss(tmp_path):
    r = elastic(tmp_path, [{"epochs": 3, "checkpoint": 3, "kill": ["h1"], "exit": 0},
                           {"exit": 0}], "--hosts", "h0:2,h1:2", *TRAIN, mpi="openmpi")
    assert r.returncode == 0, r.stderr
    assert len(calls(tmp_path)) == 2
    assert own_lines(r.stderr)[0].startswith("psgd-elastic: restart 1/3: lost host h1 at epoch 4")


def test_the_hosts_of_a_slurm_allocation(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/bin/sh\n[ \"$3\" = 'n[0-2]' ] && printf 'n0\\nn1\\nn2\\n'\n")
    scontrol.chmod(0o755)
    env = {"SLURM_JOB_NODELIST": "n[0-2]", "SLURM_TASKS_PER_NODE": "2(x2),1",
           "PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}
    r = elastic(tmp_path, [{"exit": 0}], *TRAIN, env=env)
    assert r.returncode == 0, r.stderr
    assert placement(calls(tmp_path)[0]) == ("n0:2,n1:2,n2:1", 5)


@pytest.mark.parametrize("args, culprit", [
    (["--hosts", "h0:2"] + TRAIN[:-2], "--checkpoint-dir is required"),
    (["--hosts", "h0:x"] + TRAIN, "--hosts: 'h0:x' is not HOST or HOST:SLOTS"),
    (["--hosts", "h0,h0"] + TRAIN, "--hosts: host h0 is named twice"),
    (["--hosts", "h0,h1", "--min-hosts", "3"] + TRAIN, "--min-hosts 3: only 2 hosts given"),
    (["--hosts", "h0", "--max-restarts", "-1"] + TRAIN, "--max-restarts must be >= 0"),
    (TRAIN, "no hosts: give --hosts"),
    (["--hosts", "h0", "--launcher", "no-such-mpiexec -v"] + TRAIN,
     "--launcher: 'no-such-mpiexec -v' is not a command found here"),
])
def test_bad_flags_are_named_before_any_launch(tmp_path, args, culprit):
    env = {k: "" for k in ("SLURM_JOB_NODELIST",)}
    r = elastic(tmp_path, [{"exit": 0}], *args, env=env)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.splitlines()) == 1 and culprit in r.stderr, r.stderr
    assert calls(tmp_path) == []


def test_a_signal_stops_the_job_without_a_restart(tmp_path):
    (tmp_path / "fake.py").write_text(FAKE)
    (tmp_path / "state.json").write_text(json.dumps(
        {"script": [{"epochs": 1, "sleep": 30}, {"exit": 0}], "dead": []}))
    job = subprocess.Popen([sys.executable, ELASTIC, "--launcher", "%s %s" % (
        sys.executable, tmp_path / "fake.py"), "--mpi", "mpich", "--hosts", "h0"] + TRAIN,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
        env=dict(os.environ, PSGD_PYTHON=sys.executable), stdin=subprocess.DEVNULL)
    deadline = time.time() + 20
    while not calls(tmp_path) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=20)
    assert job.returncode == 128 + signal.SIGTERM, err
    assert "stopped by signal 15: not restarted" in err
    assert len(calls(tmp_path)) == 1
