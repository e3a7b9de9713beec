"""The cluster's sshd: PID 1 of every host. MPI launchers start their
daemons on other hosts through ssh; here `ssh HOST COMMAND` connects to the
host's socket (a file on the shared filesystem, as a real cluster's sshd is
on the network), hands over its stdin, stdout and stderr, and the command
runs inside that host. As with ssh: the exit status comes back, a client
that goes away hangs its command up (SIGHUP to its session), and a host
that dies closes the connection (status 255)."""
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

from .state import STATE_DIR

LOST = 255          # ssh's status when the connection is lost
HANGUP_GRACE_S = 2  # then SIGKILL, as a dying sshd's children would get


def socket_path(name):
    return os.path.join(STATE_DIR, name + ".sock")


class Host:
    """PID 1 of a host: serves `ssh` sessions and reaps every orphan."""

    def __init__(self, name):
        self.exits, self.done = {}, threading.Condition()
        path = socket_path(name)
        if os.path.exists(path):
            os.unlink(path)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(64)

    def serve(self):
        threading.Thread(target=self._reap, daemon=True).start()
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _reap(self):
        # orphans of the whole host are ours to reap, not only our children
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(0.05)
                continue
            with self.done:
                self.exits[pid] = os.waitstatus_to_exitcode(status)
                self.done.notify_all()

    def _session(self, conn):
        with conn:
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError):
                return
            try:
                pid = os.posix_spawn(
                    "/bin/sh", ["sh", "-c", 'cd "$0" 2>/dev/null || cd /; exec "$@"',
                                request["cwd"]] + request["argv"], request["env"],
                    file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)],
                    setsid=True)
            except OSError as e:
                conn.sendall(b"%d %s\n" % (127, str(e).encode()))
                return
            finally:
                for fd in fds:
                    os.close(fd)
            code = self._wait(pid, conn)
            try:
                conn.sendall(b"%d\n" % (code if code >= 0 else 128 - code))
            except OSError:
                pass

    def _wait(self, pid, conn):
        conn.settimeout(0.05)
        hung_up = None
        while True:
            with self.done:
                if pid in self.exits:
                    return self.exits.pop(pid)
                self.done.wait(0.05)
            if hung_up is None:
                try:
                    if conn.recv(1) == b"":
                        hung_up = time.time()
                        _signal_group(pid, signal.SIGHUP)
                except socket.timeout:
                    pass
                except OSError:
                    hung_up = time.time()
            elif time.time() - hung_up > HANGUP_GRACE_S:
                _signal_group(pid, signal.SIGKILL)


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _receive(conn):
    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
    if len(head) < 4 or len(fds) != 3:
        raise ValueError("bad request")
    size, = struct.unpack("!I", head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("short request")
        body += chunk
    return json.loads(body), fds


def run(name, argv, env=None):
    """Client: `argv` on host `name` with this process's stdio; its exit
    status (255 if the host cannot be reached or goes away)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path(name))
    except OSError as e:
        print("ssh: connect to host %s: %s" % (name, e.strerror), file=sys.stderr)
        return LOST
    body = json.dumps({"argv": list(argv), "cwd": os.getcwd(),
                       "env": dict(os.environ if env is None else env)}).encode()
    socket.send_fds(conn, [struct.pack("!I", len(body))], [0, 1, 2])
    conn.sendall(body)
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = conn.recv(256)
        if not chunk:
            print("Connection to %s closed by remote host." % name, file=sys.stderr)
            return LOST
        reply += chunk
    code, _, why = reply.decode().strip().partition(" ")
    if why:
        print("ssh: %s: %s" % (name, why), file=sys.stderr)
    return int(code)
