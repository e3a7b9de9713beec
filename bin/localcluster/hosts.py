"""A host is a process tree of its own: its network namespace, plus its own
hostname, IPC, PID namespace, /proc and /dev/shm, so MPI libraries see
separate nodes and cannot take shared memory between them. The host's PID 1
is its sshd (sshd.py); killing it kills every process of the host at once,
as pulling the power would."""
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

from . import sshd
from .network import host_ns
from .state import STATE_DIR, ClusterError

ENTER = ("--net", "--uts", "--ipc", "--pid", "--mount")
TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "psgd-local-cluster")


def hosts_file():
    return os.path.join(STATE_DIR, "hosts")


def write_hosts_file(hosts):
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    lines += ["%s %s" % (h["addr"], h["name"]) for h in hosts]
    with open(hosts_file(), "w") as f:
        f.write("\n".join(lines) + "\n")


def start(name):
    """Start host `name`; returns {"pid", "pidns"}: its PID 1 as the machine
    sees it and its PID namespace, once it takes ssh sessions."""
    # /etc/hosts is bound over inside the host's own mount namespace only.
    # Its /tmp is its own, as a real host's: launchers name files there by
    # PID, and PIDs start again at 1 on every host (Open MPI's daemon found
    # another host's stale session directory and failed).
    tmp = os.path.join(STATE_DIR, "tmp-" + name)
    os.makedirs(tmp, mode=0o1777, exist_ok=True)
    setup = ("hostname {name} && mount -t tmpfs -o mode=1777,size=50% psgd-shm /dev/shm && "
             "mount --bind {tmp} /tmp && mount --bind {hosts} /etc/hosts && "
             "exec {py} -S {tool} serve-host {name}").format(
                 name=name, tmp=shlex.quote(tmp), hosts=shlex.quote(hosts_file()),
                 py=shlex.quote(sys.executable), tool=shlex.quote(TOOL))
    # nsenter --net, not `ip netns exec`, which remounts /sys (slurmd's
    # cgroup check then fails)
    holder = subprocess.Popen(
        ["nsenter", "--net=/var/run/netns/" + host_ns(name), "unshare", "--uts", "--ipc",
         "--pid", "--fork", "--mount", "--mount-proc", "--propagation", "private",
         "sh", "-c", setup],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    deadline = time.time() + 10
    while not _answers(name):
        if holder.poll() is not None or time.time() > deadline:
            holder.kill()
            raise ClusterError("host %s did not start: %s" % (
                name, holder.stderr.read().decode().strip() or "timed out"))
        time.sleep(0.02)
    pid = init_pid(holder.pid)
    return {"pid": pid, "pidns": os.stat("/proc/%d/ns/pid" % pid).st_ino,
            "netns": os.stat("/proc/%d/ns/net" % pid).st_ino}


def _answers(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sshd.socket_path(name))
        return True
    except OSError:
        return False
    finally:
        s.close()


def init_pid(unshare_pid):
    """The PID (in the machine's namespace) of the host's PID 1: the child
    `unshare --fork` made."""
    with open("/proc/%d/task/%d/children" % (unshare_pid, unshare_pid)) as f:
        return int(f.read().split()[0])


def alive(host):
    """Whether the host's PID 1 still runs (a reused PID is not the host)
    and takes sessions (a PID 1 being killed has closed its socket first)."""
    if "pid" not in host:
        return False
    if _inside_a_host():
        # other hosts' processes are out of sight here: their sshd answers
        return _answers(host["name"])
    try:
        same = os.stat("/proc/%d/ns/pid" % host["pid"]).st_ino == host["pidns"]
    except FileNotFoundError:
        return False
    return same and _answers(host["name"])


def _inside_a_host():
    # a host's PID namespace is a child of the machine's: its PID 1 is ours
    with open("/proc/1/cmdline", "rb") as f:
        return b"serve-host" in f.read()


def current(state):
    """The host this process runs in, or None on the machine itself."""
    here = os.stat("/proc/self/ns/net").st_ino
    return next((h for h in state["hosts"] if h.get("netns") == here), None)


def require_alive(host):
    """`host`, or the error that says it was killed."""
    if not alive(host):
        raise ClusterError("host %s is down (killed): `psgd-local-cluster down` and `up` again"
                           % host["name"])
    return host


def enter_command(state, host, argv):
    """argv run inside `host`, in this process's working directory."""
    require_alive(host)
    here = current(state)
    if here is not None and here["name"] == host["name"]:
        return list(argv)
    if here is not None:      # from one host to another, as a user would: ssh
        return [sys.executable, "-S", TOOL, "ssh", host["name"]] + [
            shlex.quote(a) for a in argv]
    return (["nsenter", "--target", str(host["pid"])] + list(ENTER) +
            ["sh", "-c", 'cd "$0" && exec "$@"', os.getcwd()] + list(argv))


def kill(host, timeout=10):
    """SIGKILL the host's PID 1: the kernel then kills every process of the
    host's PID namespace."""
    if not alive(host):
        return
    os.kill(host["pid"], signal.SIGKILL)
    deadline = time.time() + timeout
    while alive(host) and time.time() < deadline:
        time.sleep(0.02)
