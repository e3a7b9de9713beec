"""psgd.torch is optional and floor 3: only psgd/torch.py imports torch, and
it leans on the algorithms and the runtime floor only (docs/architecture.md)."""
import ast
import pathlib
import subprocess
import sys

import psgd

ROOT = pathlib.Path(psgd.__file__).parent
ALLOWED = ("algorithms", "buffers", "mpi", "agreement", "errors", "torch_buckets",
           "torch_optimizer")


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


def test_psgd_torch_imports_point_down():
    for name, level in imports(ROOT / "torch.py"):
        if level:
            assert name.split(".")[0] in ALLOWED, name
        else:
            assert name.split(".")[0] in ("numpy", "torch", "mpi4py", "cupy"), name


def test_import_psgd_does_not_import_torch():
    code = "import sys, psgd, psgd.worker; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
