"""psgd.torch is optional and floor 3: only psgd/torch.py imports torch, and
it leans on the algorithms, the runtime floor and the standard library only
(docs/architecture.md)."""
import ast
import importlib.util
import os
import pathlib
import subprocess
import sys
import sysconfig

import psgd

ROOT = pathlib.Path(psgd.__file__).parent
ALLOWED = ("algorithms", "buffers", "mpi", "agreement", "errors", "torch_buckets",
           "torch_optimizer", "torch_factors", "torch_factor_choice")


def imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module is None:
                yield from ((a.name, node.level) for a in node.names)
            else:
                yield node.module, node.level


def test_only_psgd_torch_imports_torch():
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "torch.py":
            continue
        for name, level in imports(path):
            assert not (level == 0 and name.split(".")[0] == "torch"), path
            assert not (level and name.split(".")[0] == "torch" and path.parent == ROOT), path


def standard_library(name):
    spec = importlib.util.find_spec(name)
    where = os.path.realpath(sysconfig.get_paths()["stdlib"])
    return spec is not None and (spec.origin in ("built-in", "frozen") or os.path.realpath(
        spec.origin).startswith(where + os.sep))


def test_psgd_torch_imports_point_down():
    for name, level in imports(ROOT / "torch.py"):
        if level:
            assert name.split(".")[0] in ALLOWED, name
        else:
            top = name.split(".")[0]
            assert top in ("numpy", "torch", "mpi4py", "cupy") or standard_library(top), name


def test_the_standard_library_is_told_from_the_rest():
    assert standard_library("contextlib") and standard_library("sys")
    assert not standard_library("numpy") and not standard_library("psgd")


def test_import_psgd_does_not_import_torch():
    code = "import sys, psgd, psgd.worker; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
