"""docs/protocol.md: only buffer-based (uppercase) MPI calls, nothing pickled, on
any path. mpi4py's lowercase communication methods pickle; none is called on
a communicator anywhere in psgd/."""
import ast
import pathlib

import psgd

ROOT = pathlib.Path(psgd.__file__).parent
PICKLING = {"allreduce", "bcast", "gather", "allgather", "scatter", "alltoall", "reduce",
            "scan", "exscan", "send", "recv", "sendrecv", "isend", "irecv", "ssend",
            "issend", "bsend", "ibsend", "probe", "mprobe", "improbe"}


def pickling_calls(source):
    """(line, text) of every `<...comm...>.<lowercase call>(...)` in `source`:
    whatever is called on an expression that names a communicator."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in PICKLING:
            if not isinstance(node.func.value, (ast.Name, ast.Attribute)):
                continue                 # mpi.Exchange(comm, buffer).bcast(): buffer-based
            owner = ast.unparse(node.func.value)
            if "comm" in owner.lower() or owner in ("MPI.COMM_WORLD", "world"):
                found.append((node.lineno, ast.unparse(node.func)))
    return found


def test_no_pickling_mpi_call_in_psgd():
    offenders = ["%s:%d %s" % (path.relative_to(ROOT.parent), line, text)
                 for path in sorted(ROOT.rglob("*.py"))
                 for line, text in pickling_calls(path.read_text())]
    assert offenders == []


def test_the_scan_sees_the_calls_it_forbids():
    assert pickling_calls("n = self.comm.allreduce(x, op=MPI.SUM)\ncomm.bcast(y)\n") \
        == [(1, "self.comm.allreduce"), (2, "comm.bcast")]
    assert pickling_calls("self.comm.Allreduce(MPI.IN_PLACE, b)\nself.exchange.bcast(0)\n") == []
