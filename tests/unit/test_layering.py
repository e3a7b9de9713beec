"""The floors of docs/architecture.md over the real import graph of psgd/, every
import statement (relative ones and those inside functions included): each
module imports only from floors below its own, or from its own package."""
import ast
import pathlib

import pytest

import psgd

ROOT = pathlib.Path(psgd.__file__).parent

# Module-name prefix -> floor (the longest matching prefix wins).
FLOORS = {"psgd.errors": 0, "psgd._threads": 0, "psgd._cuda_first": 0, "psgd.protocol": 0,
          "psgd.settings": 0, "psgd.jit": 0,
          "psgd.backend": 1, "psgd.buffers": 1, "psgd.mpi": 1, "psgd.mpi_async": 1,
          "psgd.kernels": 1, "psgd.kernel_loops": 1, "psgd.compression": 1, "psgd.hierarchy": 1,
          "psgd.cuda_aware": 1, "psgd.atomic": 1, "psgd.agreement": 1, "psgd.pieces": 1,
          "psgd.pipeline": 1, "psgd.nccl": 1, "psgd.trace": 1, "psgd.command_line": 1,
          "psgd.ulfm": 1,
          "psgd": 2, "psgd.algorithms": 2,      # the package's facade re-exports create()
          "psgd.nnet": 3, "psgd.data": 3, "psgd.kaldi_io": 3, "psgd.torch": 3,
          "psgd.torch_buckets": 3, "psgd.torch_optimizer": 3, "psgd.torch_factors": 3, "psgd.torch_factor_choice": 3,
          "psgd.train": 4,
          "psgd.worker": 5, "psgd.timeline": 5, "psgd.kaldi": 5}
# Imports within a floor that the architecture names; nothing else crosses.
SIDEWAYS = {("psgd.kaldi_io", "psgd.nnet"), ("psgd.kaldi_io", "psgd.data"),
            ("psgd._cuda_first", "psgd.settings"), ("psgd.jit", "psgd.settings"),
            ("psgd.kernels", "psgd.kernel_loops"),
            ("psgd.buffers", "psgd.backend"), ("psgd.kernels", "psgd.backend"),
            ("psgd.mpi", "psgd.backend"), ("psgd.mpi", "psgd.cuda_aware"),
            ("psgd.mpi", "psgd.mpi_async"), ("psgd.hierarchy", "psgd.mpi"), ("psgd.command_line", "psgd.atomic"),
            ("psgd.compression", "psgd.kernels"), ("psgd.compression", "psgd.buffers"),
            ("psgd.compression", "psgd.backend"),
            ("psgd.pieces", "psgd.mpi"), ("psgd.pipeline", "psgd.mpi"),
            ("psgd.nccl", "psgd.mpi"), ("psgd.nccl", "psgd.backend"),
            ("psgd.nccl", "psgd.agreement"),
            ("psgd", "psgd.algorithms"), ("psgd.torch", "psgd.torch_buckets"),
            ("psgd.torch", "psgd.torch_optimizer"), ("psgd.torch", "psgd.torch_factors"),
            ("psgd.torch_buckets", "psgd.torch_factors"),
            ("psgd.torch", "psgd.torch_factor_choice"), ("psgd.torch_factor_choice", "psgd.torch_factors")}
# Allowed although they point down: the data layer needs no MPI, no buffers;
# nnet and algorithms do not know each other.
FORBIDDEN = {"psgd.data": ("psgd.mpi", "psgd.buffers", "psgd.kernels", "psgd.algorithms",
                           "psgd"),
             "psgd.nnet": ("psgd.algorithms",),
             "psgd.algorithms": ("psgd.nnet",)}


def module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports(name, path, known):
    """The psgd modules `name` imports, relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                target = base + ("." + node.module if node.module else "")
            else:
                target = node.module
            submodules = [target + "." + a.name for a in node.names
                          if target + "." + a.name in known]
            # `from .. import mpi` imports the module psgd.mpi, not the facade
            found.update(submodules if len(submodules) == len(node.names) else [target])
    return {m for m in found if m == "psgd" or m.startswith("psgd.")}


def prefix(name, table):
    best = max((p for p in table if name == p or name.startswith(p + ".")), key=len)
    return best


def floor(name):
    return FLOORS[prefix(name, FLOORS)]


def problems(graph):
    out = []
    for name, targets in graph.items():
        mine = prefix(name, FLOORS)
        for target in sorted(targets):
            theirs = prefix(target, FLOORS)
            if theirs == mine:
                continue                 # inside one package
            if any(target == f or (f != "psgd" and target.startswith(f + "."))
                   for f in FORBIDDEN.get(mine, ())):
                out.append("%s imports %s (forbidden for %s)" % (name, target, mine))
            elif floor(target) > floor(name) or (
                    floor(target) == floor(name) and (mine, theirs) not in SIDEWAYS):
                out.append("%s (floor %d) imports %s (floor %d)" % (
                    name, floor(name), target, floor(target)))
    return out


def real_graph():
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_import_points_down():
    assert problems(real_graph()) == []


def test_the_graph_sees_relative_imports():
    graph = real_graph()
    assert "psgd.mpi" in graph["psgd.algorithms.base"]              # from .. import mpi
    assert "psgd.nnet.parallel.collectives" in graph["psgd.nnet.parallel.network"]


@pytest.mark.parametrize("importer, imported", [
    ("psgd.nnet.network", "psgd.algorithms.base"),       # nnet and algorithms are strangers
    ("psgd.algorithms.bmuf", "psgd.train.trainer"),      # a floor above
    ("psgd.mpi", "psgd.algorithms"),
    ("psgd.data.minibatch", "psgd.mpi"),
    ("psgd.nnet.network", "psgd.data.minibatch"),        # sideways, not named
    ("psgd.kaldi_io.nnet1", "psgd.train.model_files"),   # the formats know no trainer
])
def test_a_wrong_import_is_caught(importer, imported):
    graph = real_graph()
    graph[importer] = graph[importer] | {imported}
    assert problems(graph), "%s -> %s passed" % (importer, imported)


def test_data_needs_no_mpi():
    for name, path in modules().items():
        if name.startswith("psgd.data"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                        else [node.module or ""]
                    assert not any(n.startswith("mpi4py") for n in names), name


def test_benchmarks_share_common_without_a_cycle():
    """benchmarks/common.py is what every benchmark builds on: it imports
    none of them (mpi_regimes and the rest import it)."""
    folder = ROOT.parent / "benchmarks"
    scripts = {p.stem for p in folder.glob("*.py")}
    tree = ast.parse((folder / "common.py").read_text())
    named = {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for a in node.names}
    named |= {node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}
    assert not named & (scripts - {"common"}), named & scripts


def test_no_module_imports_itself_back():
    """No cycle among psgd's modules, imports inside functions included
    (a package stands for its __init__)."""
    graph = real_graph()

    def known(target):
        while target not in graph and "." in target:
            target = target.rpartition(".")[0]
        return target
    edges = {name: {known(t) for t in targets} - {name} for name, targets in graph.items()}
    done, path = set(), []

    def visit(name):
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        path.append(name)
        for target in sorted(edges.get(name, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(name)
        return None
    for name in sorted(edges):
        path.clear()
        cycle = visit(name)
        assert cycle is None, " -> ".join(cycle)
