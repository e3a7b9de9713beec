"""Bringing the whole cluster up and down, and breaking one host of it."""
import os
import shutil

from . import hosts as _hosts
from . import launch, network
from .state import (ALL_DIR, CONTROLLER, STATE_DIR, ClusterError, host, host_address, load,
                    others_up, require, save)


def up(count, rate=None, slurm=False):
    if os.geteuid() != 0:
        raise ClusterError("namespace hosts need root (ip netns, unshare)")
    if load() is not None:
        raise ClusterError("a cluster is already up (%s): `psgd-local-cluster down` first"
                           % STATE_DIR)
    if not 1 <= count <= 200:
        raise ClusterError("host count must be 1..200, got %d" % count)
    if rate:
        network.rate_bits(rate)
    down()                      # whatever a crashed `up` left
    os.makedirs(STATE_DIR, exist_ok=True)
    state = {"hosts": [{"name": "h%d" % i, "addr": host_address(i)} for i in range(count)],
             "rate": rate, "controller": None, "slurm": None}
    save(state)                 # from here `down` can undo everything
    try:
        network.add_blackhole()
        network.add_bridge()
        machines = list(state["hosts"])
        if slurm:
            state["controller"] = dict(CONTROLLER)
            machines.append(state["controller"])
        _hosts.write_hosts_file(machines)
        for h in machines:
            network.add_host(h["name"], h["addr"], rate if h in state["hosts"] else None)
            h.update(_hosts.start(h["name"]))
            save(state)
        launch.write_agent()
        if slurm:
            from . import slurm as _slurm
            state["slurm"] = _slurm.start(state)
            save(state)
    except BaseException:
        down()
        raise
    return state


def down():
    """Undo everything `up` did, whatever state it is in: no namespace, no
    process, no mount, no route, no daemon is left."""
    state = load()
    if state is not None:
        # SLURM's daemons die with their hosts
        for h in state["hosts"] + ([state["controller"]] if state.get("controller") else []):
            if "pid" in h and _hosts.alive(h):
                _hosts.kill(h)
    for ns in network.namespaces():
        network.delete_namespace(ns)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    if not others_up():
        network.remove_blackhole()
        shutil.rmtree(ALL_DIR, ignore_errors=True)


def kill(name):
    state = require()
    _hosts.kill(host(state, name))


def cut(name, up=False):
    state = require()
    network.set_link(host(state, name)["name"], up, [h["name"] for h in state["hosts"]])


def slow(name, rate):
    state = require()
    h = host(state, name)
    network.shape(h["name"], rate)
    h["rate"] = rate
    save(state)


def status():
    state = load()
    if state is None:
        return "no cluster is up"
    lines = []
    for h in state["hosts"]:
        c = network.counters(h["name"])
        lines.append("%-4s %-13s %-5s rate %-8s sent %d B, received %d B" % (
            h["name"], h["addr"], "up" if _hosts.alive(h) else "DOWN",
            h.get("rate") or state["rate"] or "-", c["tx_bytes"], c["rx_bytes"]))
    return "\n".join(lines)
