"""Starting programs across the hosts: the ssh stand-in that MPI launchers
call (`launcher HOST COMMAND`, as ssh is called), and the commands that run
a launcher (MPICH's hydra, Open MPI's prterun, torchrun) on the first host,
as a user would from a cluster's login node."""
import os
import shutil
import subprocess
import sys

from . import hosts as _hosts
from . import network, sshd
from .state import STATE_DIR, ClusterError, host
from .state import require as load_state

# ssh's options that take a value (ssh(1)): skipped with their value.
SSH_VALUE_OPTIONS = set("BbcDEeFIiJLlmOopQRSWw")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def agent_path():
    return os.path.join(STATE_DIR, "ssh")


def write_agent():
    """The executable MPI launchers are given in place of ssh."""
    script = "#!/bin/sh\nexec %s -S %s ssh \"$@\"\n" % (
        sys.executable, os.path.join(ROOT, "bin", "psgd-local-cluster"))
    with open(agent_path(), "w") as f:
        f.write(script)
    os.chmod(agent_path(), 0o755)


def parse_ssh(argv):
    """(host, command string) of an ssh command line."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        flag = argv[i]
        i += 2 if len(flag) == 2 and flag[1] in SSH_VALUE_OPTIONS else 1
    if i >= len(argv):
        raise ClusterError("ssh stand-in: no host in %r" % (argv,))
    host = argv[i].rpartition("@")[2]
    return host, " ".join(argv[i + 1:])


def ssh(state, argv):
    """Run as `ssh [options] HOST COMMAND`: the command, through a shell as
    ssh runs it, inside the host."""
    name, command = parse_ssh(argv)
    host(state, name)
    return sshd.run(name, ["sh", "-c", command] if command else ["sh"])


def find_tool(name):
    """A launcher from $MPIEXEC / PATH, or the repository's .venv."""
    found = shutil.which(name) or os.path.join(ROOT, ".venv", "bin", name)
    if not os.path.exists(found):
        raise ClusterError("%s not found on PATH nor in %s/.venv/bin: `make install` or "
                           "activate your virtualenv" % (name, ROOT))
    return os.path.abspath(found)


def flavour(launcher):
    out = subprocess.run([launcher, "--version"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    if "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text:
        return "openmpi"
    if "HYDRA" in text or "MPICH" in text:
        return "mpich"
    raise ClusterError("%s: not MPICH's hydra nor Open MPI's mpirun" % launcher)


HOST_FLAGS = {"mpich": ("-hosts", "-host", "-f", "-hostfile", "-machinefile"),
              "openmpi": ("--host", "-host", "-H", "--hostfile", "-hostfile",
                          "--machinefile", "-machinefile")}


HOST_LISTS = ("-hosts", "-host", "--host", "-H")     # the flags whose value names hosts


def named_hosts(args):
    """The host names the launcher's options give, in host lists
    (`-hosts h0:2,h1:2`) and host files (a name first on each line), up to
    the program (the first word that is a command: its own options are not
    the launcher's)."""
    names, i = [], 0
    while i + 1 < len(args):
        flag, value = args[i], args[i + 1]
        if flag in HOST_LISTS:
            names += [h.split(":")[0] for h in value.split(",") if h]
        elif flag in HOST_FLAGS["mpich"] + HOST_FLAGS["openmpi"]:
            if os.path.isfile(value):
                with open(value) as f:
                    names += [line.split()[0].split(":")[0] for line in f
                              if line.strip() and not line.lstrip().startswith("#")]
        elif flag.startswith("-") or not shutil.which(flag):
            i += 1
            continue
        else:
            break
        i += 2
    return names


def mpirun_command(state, args, launcher=None):
    launcher = launcher or os.environ.get("MPIEXEC") or find_tool("mpiexec")
    kind = flavour(launcher)
    for name in named_hosts(args):      # before the launcher, whose own lines say less
        _hosts.require_alive(host(state, name))
    live = ",".join(h["name"] for h in state["hosts"] if _hosts.alive(h))
    if kind == "mpich":
        cmd = [launcher, "-launcher", "ssh", "-launcher-exec", agent_path()]
        if not any(a in HOST_FLAGS[kind] for a in args):
            cmd += ["-hosts", live]
    else:
        cmd = [launcher, "--prtemca", "plm_ssh_agent", agent_path()]
        if not any(a in HOST_FLAGS[kind] for a in args):
            cmd += ["--host", live, "--map-by", "node"]
    return launcher, cmd + list(args)


def first_live(state):
    for h in state["hosts"]:
        if _hosts.alive(h):
            return h
    raise ClusterError("every host of the cluster is down")


def with_tool_path(env, tool):
    """PATH with the launcher's folder first, as an activated virtualenv has it,
    so `python` in a command means the launcher's Python."""
    env = dict(env)
    env["PATH"] = os.path.dirname(tool) + os.pathsep + env.get("PATH", "")
    return env


def mpirun(state, args):
    """The launcher's exit status; when the job lost a host, a line saying
    which and how (Open MPI's launcher exits 0 then: 1 instead)."""
    launcher, cmd = mpirun_command(state, args)
    before = lost_hosts(state)
    code = subprocess.call(_hosts.enter_command(state, first_live(state), cmd),
                           env=with_tool_path(os.environ, launcher))
    lost = {h: why for h, why in lost_hosts(load_state()).items() if h not in before}
    for name, why in lost.items():
        print("psgd-local-cluster: the job lost host %s (%s)" % (name, why), file=sys.stderr)
    return code or (1 if lost else 0)


def lost_hosts(state):
    """{host: how} of the hosts that are down or cut off."""
    return {h["name"]: "killed: its processes are gone" if not _hosts.alive(h) else
            "cut off: its link is down" for h in state["hosts"]
            if not _hosts.alive(h) or not network.link_up(h["name"])}


def torchrun(state, args, port=29500):
    """torchrun on every live host (node ranks in host order), rendezvous at
    the first; returns the worst exit status."""
    tool = find_tool("torchrun")
    live = [h for h in state["hosts"] if _hosts.alive(h)]
    env = with_tool_path(os.environ, tool)
    env.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    procs = []
    for i, h in enumerate(live):
        cmd = [tool, "--nnodes", str(len(live)), "--node-rank", str(i),
               "--master-addr", live[0]["addr"], "--master-port", str(port)] + list(args)
        procs.append(subprocess.Popen(_hosts.enter_command(state, h, cmd), env=env))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)
