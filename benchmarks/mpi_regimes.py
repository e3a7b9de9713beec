"""The MPI regimes the benchmarks run in: how MPI moves bytes between the
ranks of one machine (`--regime` of the benchmark scripts).

On one machine MPI copies through shared memory, which flatters bandwidth
and makes every elementwise pass look expensive next to it. The network
regime forces MPI through its network path (TCP over loopback), closer to
a job across machines. MPICH (ch4:ucx,ofi): MPIR_CVAR_NOLOCAL=1 alone
changes nothing; with the UCX netmod over TCP it does. Open MPI: the TCP
BTL (with the ob1 PML, which owns the BTLs).
"""
import common

REGIMES = ("shm", "network")
NETWORK_ENV = {
    "mpich": {"MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp", "MPIR_CVAR_NOLOCAL": "1"},
    "openmpi": {"OMPI_MCA_btl": "tcp,self", "OMPI_MCA_pml": "ob1"},
}


REGIME_NOTE = (
    "Regimes: `shm` is MPI as it runs on one machine (ranks exchange through shared "
    "memory, a memcpy); `network` forces MPI through its network path over loopback TCP "
    "(MPICH: `MPIR_CVAR_CH4_NETMOD=ucx UCX_TLS=tcp MPIR_CVAR_NOLOCAL=1`; Open MPI: "
    "`OMPI_MCA_btl=tcp,self OMPI_MCA_pml=ob1`), where moving the bytes costs more next "
    "to the update, as between machines (`--regime` of the benchmark scripts). Loopback "
    "TCP is still CPU work of the ranks' own processes here (no NIC to offload to), so "
    "it slows the transfer but leaves little to overlap with the update.")


def regime_env(regime):
    """The variables that put a child job's MPI in `regime`."""
    if regime not in REGIMES:
        raise ValueError("unknown regime %r; valid: %s" % (regime, ", ".join(REGIMES)))
    return dict(NETWORK_ENV[common.mpi_flavour()]) if regime == "network" else {}


def regimes(choice):
    """--regime shm | network | both -> the regimes to run, in order."""
    if choice == "both":
        return REGIMES
    regime_env(choice)    # validates
    return (choice,)


def add_regime_arg(parser, default="both"):
    parser.add_argument("--regime", default=default, choices=REGIMES + ("both",),
                        help="MPI through shared memory, through its network path "
                             "(TCP), or both (default %s)" % default)


def run_in_regime(script, np_, out, regime, args=(), env=None, **kwargs):
    """run_child in `regime`; the result records the regime and its variables."""
    variables = regime_env(regime)
    data = common.run_child(script, np_, out, args, env=dict(env or {}, **variables), **kwargs)
    data["regime"] = regime
    data["regime_env"] = variables
    return data
