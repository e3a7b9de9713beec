"""Where a cluster's facts live while it is up: one JSON file under /run,
written whole (a crash mid-write must not leave half a cluster described)."""
import json
import os

# Several clusters may be up at once, each under its own name (each its own
# bridge: their hosts reach only each other).
NAME = os.environ.get("PSGD_LOCAL_CLUSTER", "main")
if not NAME.isalnum() or len(NAME) > 8:
    raise SystemExit("psgd-local-cluster: error: PSGD_LOCAL_CLUSTER=%r: up to 8 letters "
                     "and digits" % NAME)
ALL_DIR = "/run/psgd-local-cluster"
STATE_DIR = os.path.join(ALL_DIR, NAME)
STATE_FILE = os.path.join(STATE_DIR, "state.json")

# Everything this tool makes carries this prefix, so `down` can find what a
# crashed `up` left behind.
PREFIX = "psgdlc-%s-" % NAME
BRIDGE_NS = PREFIX + "br"
# 198.18.0.0/15 is set aside for benchmarking networks (RFC 2544): nothing
# real answers there, and the machine's own namespace blackholes it while up.
NETWORK = "198.18.0.0/15"
PREFIXLEN = 15


def host_address(index):
    return "198.18.0.%d" % (10 + index)


CONTROLLER = {"name": "ctl", "addr": "198.18.0.2"}


class ClusterError(Exception):
    """A problem the user can fix, said in one line."""


def others_up():
    """Whether a cluster of another name is up (the blackhole route is theirs too)."""
    try:
        return any(n != NAME for n in os.listdir(ALL_DIR))
    except FileNotFoundError:
        return False


def load():
    try:
        with open(STATE_FILE) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise ClusterError("%s is corrupt (%s): run `psgd-local-cluster down`" % (STATE_FILE, e))


def require():
    state = load()
    if state is None:
        raise ClusterError("no cluster is up: run `psgd-local-cluster up H` first")
    return state


def save(state):
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = STATE_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, STATE_FILE)


def host(state, name):
    for h in state["hosts"] + ([state["controller"]] if state.get("controller") else []):
        if h["name"] == name:
            return h
    raise ClusterError("no host %r in this cluster (hosts: %s)" % (
        name, ", ".join(h["name"] for h in state["hosts"])))
