"""psgd.kaldi is floor 3: errors, backend, atomic files, nnet and data below
it; psgd.nnet does not know it. The two command-line entry points load .npz models through
psgd.train, as the worker CLI does, and are the only exception."""
import ast
import pathlib

import psgd.kaldi
import psgd.nnet

ALLOWED = ("psgd.errors", "psgd.settings", "psgd.backend", "psgd.atomic", "psgd.nnet", "psgd.data",
           "psgd.kaldi")
ENTRY_POINTS = {"__main__.py": ("psgd.train",), "forward.py": ("psgd.train",)}


def _imports(path, package):
    """Absolute names of what `path` (a module of `package`) imports."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                if node.level else []
            yield ".".join(base + ([node.module] if node.module else []))


def test_kaldi_imports_point_down_only():
    root = pathlib.Path(psgd.kaldi.__file__).parent
    for path in sorted(root.glob("*.py")):
        allowed = ALLOWED + ENTRY_POINTS.get(path.name, ())
        for name in _imports(path, "psgd.kaldi"):
            assert not name.startswith("mpi4py"), (path.name, name)
            if name.startswith("psgd"):
                assert name.startswith(allowed), (path.name, name)


def test_nnet_does_not_import_kaldi():
    root = pathlib.Path(psgd.nnet.__file__).parent
    for path in sorted(root.rglob("*.py")):
        package = ".".join(("psgd",) + path.relative_to(root.parent).parent.parts)
        for name in _imports(path, package):
            assert "kaldi" not in name, (path, name)
