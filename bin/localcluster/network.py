"""The cluster's wires: a namespace per host joined by a bridge in a
namespace of its own, each host's link shaped in both directions with tbf
(full duplex, like a NIC), and a blackhole route for the cluster's range in
the machine's own namespace while it is up."""
import json
import re
import subprocess
import time

from .state import BRIDGE_NS, NETWORK, PREFIX, PREFIXLEN, ClusterError

IFACE = "eth0"          # each host's interface, the name users pass to gloo/NCCL
BRIDGE = "br0"
UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
         "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def run(*cmd, check=True):
    result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        why = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError("`%s` failed: %s" % (" ".join(cmd), why[-1] if why else
                                                "exit %d" % result.returncode))
    return result


def rate_bits(text):
    """Bits per second of a tc rate ("1gbit", "100mbit", "10Gbit")."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]+)", text.strip().lower())
    if not m or m.group(2) not in UNITS or float(m.group(1)) <= 0:
        raise ClusterError("bad rate %r: use a tc rate such as 10mbit, 1gbit or 10gbit" % text)
    return float(m.group(1)) * UNITS[m.group(2)]


def host_ns(name):
    return PREFIX + name


def port(name):
    """The bridge's side of a host's cable."""
    return "p-" + name


def add_blackhole():
    # A command that talks to a cluster address from outside the hosts then
    # sends nothing anywhere instead of leaving by the default route.
    run("ip", "route", "replace", "blackhole", NETWORK)


def remove_blackhole():
    routes = run("ip", "route", "show", "type", "blackhole", check=False).stdout
    if NETWORK.split("/")[0] in routes:
        run("ip", "route", "del", "blackhole", NETWORK, check=False)


def add_bridge():
    run("ip", "netns", "add", BRIDGE_NS)
    run("ip", "-n", BRIDGE_NS, "link", "add", BRIDGE, "type", "bridge")
    run("ip", "-n", BRIDGE_NS, "link", "set", BRIDGE, "up")


def add_host(name, addr, rate):
    ns = host_ns(name)
    run("ip", "netns", "add", ns)
    run("ip", "link", "add", IFACE, "netns", ns, "type", "veth",
        "peer", "name", port(name), "netns", BRIDGE_NS)
    run("ip", "-n", ns, "addr", "add", "%s/%d" % (addr, PREFIXLEN), "dev", IFACE)
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "link", "set", IFACE, "up")
    run("ip", "-n", BRIDGE_NS, "link", "set", port(name), "master", BRIDGE)
    run("ip", "-n", BRIDGE_NS, "link", "set", port(name), "up")
    if rate:
        shape(name, rate)


def shape(name, rate):
    """The host's link at `rate` each way: its own egress (what it sends) and
    the bridge port's egress (what it receives)."""
    bits = rate_bits(rate)
    # tbf needs a bucket of at least one GSO packet (64 KB on veth) and about
    # a timer tick's worth of bytes at the rate to reach it.
    burst = max(128 * 1024, int(bits / 8 * 0.004))
    for ns, dev in ((host_ns(name), IFACE), (BRIDGE_NS, port(name))):
        run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
            "burst", str(burst), "latency", "100ms")


def unshape(name):
    for ns, dev in ((host_ns(name), IFACE), (BRIDGE_NS, port(name))):
        run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)


def set_link(name, up, hosts=()):
    """Pull (or plug back) the host's cable at the switch. Plugged back, the
    port forwards before this returns, and the neighbour entries of `hosts`
    are flushed: an address that failed to resolve while the cable was out
    stays FAILED for seconds, and a connect() to it meanwhile gets "No
    route to host" (CI saw the resume after a mended cut fail so)."""
    run("ip", "-n", BRIDGE_NS, "link", "set", port(name), "up" if up else "down")
    if not up:
        return
    deadline = time.time() + 5
    while time.time() < deadline and "forwarding" not in run(
            "bridge", "-n", BRIDGE_NS, "link", "show", "dev", port(name), check=False).stdout:
        time.sleep(0.05)
    for h in hosts:
        run("ip", "-n", host_ns(h), "neigh", "flush", "all", check=False)


def link_up(name):
    out = run("ip", "-n", BRIDGE_NS, "-j", "link", "show", port(name)).stdout
    return "UP" in json.loads(out)[0]["flags"]


def counters(name):
    """Bytes the host's interface sent and received."""
    out = run("ip", "-n", host_ns(name), "-s", "-j", "link", "show", IFACE).stdout
    stats = json.loads(out)[0]["stats64"]
    return {"tx_bytes": stats["tx"]["bytes"], "rx_bytes": stats["rx"]["bytes"]}


def namespaces():
    """Every namespace this tool made (also those a crashed `up` left)."""
    out = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.strip() and line.split()[0].startswith(PREFIX)]


def delete_namespace(ns):
    for pid in run("ip", "netns", "pids", ns, check=False).stdout.split():
        run("kill", "-9", pid, check=False)
    run("ip", "netns", "del", ns, check=False)
