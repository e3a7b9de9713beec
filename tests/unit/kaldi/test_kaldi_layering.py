"""psgd.kaldi_io (the formats) is floor 3: errors, settings, backend,
atomic files, nnet and data below it; psgd.nnet does not know it. The Kaldi
tools (psgd.kaldi) sit above the trainer, beside psgd.worker."""
import ast
import pathlib

import psgd.kaldi_io
import psgd.nnet

ALLOWED = ("psgd.errors", "psgd.backend", "psgd.atomic", "psgd.nnet", "psgd.data",
           "psgd.kaldi_io")


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
    root = pathlib.Path(psgd.kaldi_io.__file__).parent
    for path in sorted(root.glob("*.py")):
        for name in _imports(path, "psgd.kaldi_io"):
            assert not name.startswith("mpi4py"), (path.name, name)
            if name.startswith("psgd"):
                assert name.startswith(ALLOWED), (path.name, name)


def test_nnet_does_not_import_kaldi():
    root = pathlib.Path(psgd.nnet.__file__).parent
    for path in sorted(root.rglob("*.py")):
        package = ".".join(("psgd",) + path.relative_to(root.parent).parent.parts)
        for name in _imports(path, package):
            assert "kaldi" not in name, (path, name)
