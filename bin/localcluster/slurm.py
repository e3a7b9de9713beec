"""A real SLURM on the cluster (`up H --slurm`): munged and slurmctld on a
controller host of its own (munged's socket is a file every host sees),
one slurmd per host, all with SLURM's own defaults where a site would have
them (MpiDefault=none among them; not MinJobAge, short so that `sbatch
--wait` returns as the job ends) and nothing written outside the cluster's
state folder. Every daemon lives in a host and dies with it (its PID 1
reaps them). SLURM's commands run on h0, the login node."""
import os
import shutil
import subprocess
import time

from . import hosts as _hosts
from .state import STATE_DIR, ClusterError

DAEMONS = ("slurmctld", "slurmd", "munged")
PACKAGES = "slurm-wlm munge"


def folder():
    return os.path.join(STATE_DIR, "slurm")


def conf_path():
    return os.path.join(folder(), "slurm.conf")


def munge_socket():
    return os.path.join(folder(), "munge.socket")


def require_installed():
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        raise ClusterError("%s not installed: apt-get install %s" % (", ".join(missing), PACKAGES))


def write_conf(state):
    f = folder()
    nodes = "\n".join("NodeName=%s NodeAddr=%s CPUs=%d State=UNKNOWN" % (
        h["name"], h["addr"], os.cpu_count() or 1) for h in state["hosts"])
    ctl = state["controller"]
    conf = """# written by psgd-local-cluster up --slurm: SLURM's defaults but paths, MinJobAge
ClusterName=psgdlocal
SlurmctldHost={ctl}({ctl_addr})
AuthType=auth/munge
AuthInfo=socket={munge}
SlurmUser=root
StateSaveLocation={f}/ctld
SlurmdSpoolDir={f}/spool-%n
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd-%n.pid
SlurmctldLogFile={f}/slurmctld.log
SlurmdLogFile={f}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# sbatch --wait polls every 2 s while that is under half MinJobAge, else
# 2, 8, then 32 s: with SLURM's 300 a job that ends at 11 s returns at 42
MinJobAge=4
SlurmdParameters=config_overrides
{nodes}
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""".format(ctl=ctl["name"], ctl_addr=ctl["addr"], munge=munge_socket(), f=f, nodes=nodes)
    os.makedirs(os.path.join(f, "ctld"), exist_ok=True)
    for h in state["hosts"]:
        os.makedirs(os.path.join(f, "spool-" + h["name"]), exist_ok=True)
    with open(conf_path(), "w") as out:
        out.write(conf)


def env():
    return dict(os.environ, SLURM_CONF=conf_path())


def start(state):
    """munged, slurmctld and the slurmds, once every node is idle."""
    require_installed()
    os.makedirs(folder(), exist_ok=True)
    key = os.path.join(folder(), "munge.key")
    with open(key, "wb") as k:
        k.write(os.urandom(128))
    os.chmod(key, 0o400)
    ctl = state["controller"]
    _daemon(state, ctl, ["munged", "--key-file", key, "--socket", munge_socket(),
                         "--pid-file", os.path.join(folder(), "munged.pid"),
                         "--log-file", os.path.join(folder(), "munged.log"),
                         "--seed-file", os.path.join(folder(), "munged.seed"), "--force"])
    write_conf(state)
    _daemon(state, ctl, ["slurmctld", "-f", conf_path()])
    for h in state["hosts"]:
        _daemon(state, h, ["slurmd", "-f", conf_path(), "-N", h["name"]])
    _wait_idle(state)
    return True


def _daemon(state, host, argv):
    result = subprocess.run(_hosts.enter_command(state, host, argv), env=env(),
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterError("%s on %s: %s" % (argv[0], host["name"], (
            result.stderr or result.stdout).strip()))


def _wait_idle(state, timeout=30):
    deadline = time.time() + timeout
    out = ""
    while time.time() < deadline:
        out = subprocess.run(_hosts.enter_command(state, state["hosts"][0], [
            "sinfo", "-h", "-N", "-o", "%N %T"]), env=env(), capture_output=True,
            text=True).stdout
        states = dict(line.split() for line in out.splitlines() if line.strip())
        if len(states) == len(state["hosts"]) and all(s == "idle" for s in states.values()):
            return
        time.sleep(0.3)
    raise ClusterError("SLURM nodes not idle after %ds: %s (logs in %s)" % (
        timeout, out.strip() or "no answer", folder()))


def command(state, name, args):
    """A SLURM command (sbatch, srun, squeue...) on h0, as on a login node."""
    if not state.get("slurm"):
        raise ClusterError("SLURM is not up: `psgd-local-cluster up H --slurm`")
    return subprocess.call(_hosts.enter_command(state, state["hosts"][0], [name] + list(args)),
                           env=env())
