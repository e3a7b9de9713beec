"""psgd/settings.py: every PSGD_* variable declared and read there, once."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

import psgd
from psgd import settings

ROOT = pathlib.Path(psgd.__file__).parent


READ = re.compile(r"""(environ\.get\(|environ\[|getenv\()\s*["']PSGD_""")


def test_no_other_module_reads_a_psgd_variable():
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "settings.py":
            continue
        for line in path.read_text().splitlines():
            assert not READ.search(line), (str(path), line)


def test_every_name_asked_for_is_declared():
    asked = set()
    for path in sorted(ROOT.rglob("*.py")):
        asked.update(re.findall(r"settings\.(?:get|set|read|label)\(\"(PSGD_\w+)\"",
                                path.read_text()))
    assert asked and asked <= set(settings.SETTINGS), asked - set(settings.SETTINGS)


def printed(code, **env):
    """The lines `python -c code` prints in an environment with `env` added."""
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=120,
                          check=True).stdout.splitlines()


def test_a_setting_is_read_once():
    code = ("import os; from psgd import settings; a = settings.get('PSGD_ACCEL'); "
            "os.environ['PSGD_ACCEL'] = 'numpy'; print(a, settings.get('PSGD_ACCEL'))")
    assert printed(code, PSGD_ACCEL="numexpr") == ["numexpr numexpr"]


def test_a_bad_count_keeps_its_default_and_is_named():
    code = ("from psgd import settings; print(settings.get('PSGD_MPI_SERVER_PIECE')); "
            "print(settings.problem())")
    assert printed(code, PSGD_MPI_SERVER_PIECE="-1") == [
        "None", "PSGD_MPI_SERVER_PIECE='-1': must be a whole number >= 0"]


def test_set_checks_counts_and_gives_back_the_old_value(setting):
    old = settings.get("PSGD_MPI_CHUNK")
    assert settings.set("PSGD_MPI_CHUNK", 5) == old
    assert settings.set("PSGD_MPI_CHUNK", None) == 5          # None: the default again
    assert settings.get("PSGD_MPI_CHUNK") == settings.SETTINGS["PSGD_MPI_CHUNK"].default
    settings.set("PSGD_MPI_CHUNK", old)
    with pytest.raises(ValueError, match="MPI chunk must be >= 1, got 0"):
        settings.set("PSGD_MPI_CHUNK", 0)
    assert settings.label("PSGD_MPI_CHUNK") == "MPI chunk (PSGD_MPI_CHUNK)"
    setting("PSGD_TRACEBACK", "1")
    assert settings.get("PSGD_TRACEBACK") is True


def test_read_parses_a_given_mapping():
    assert settings.read("PSGD_BACKEND", {}) == "auto"
    assert settings.read("PSGD_BACKEND", {"PSGD_BACKEND": " numpy "}) == "numpy"
    assert settings.read("PSGD_MPI_PIPELINE_THRESHOLD", {}) is None
    assert settings.read("PSGD_TRACEBACK", {"PSGD_TRACEBACK": ""}) is False
