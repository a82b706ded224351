"""No code from the current directory: a ``libnccl.so.2`` where the user happens to stand is
never loaded, by the console script or by ``python -m clusterenv``.

The trap is a real shared object whose constructor writes a file when anything loads it. The
commands run in a virtual environment made here without the NCCL wheel (as the README's
``pip install .`` makes one), from the directory holding the trap, with ``LD_LIBRARY_PATH``
unset, empty, or holding an empty entry: the three spellings the dynamic loader reads as the
current directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterenv.nccl.probe import LIBRARY_VARIABLE, find_nccl_library
from tests.conftest import require_tool
from tests.venvs import partial_venv

TRAP_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void trap(void) {
    int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { write(fd, "loaded\n", 7); close(fd); }
}
int ncclGetVersion(int *version) { *version = 23203; return 0; }
int ncclGetUniqueId(void *id) { (void)id; return 0; }
"""


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with clusterenv's dependencies but no ``nvidia-nccl-cu*`` wheel."""
    return partial_venv(tmp_path_factory.mktemp("bare"), without=("nvidia",))


@pytest.fixture(scope="module")
def trap_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``libnccl.so.2`` and ``nvidia/nccl/lib/libnccl.so.2``, both traps."""
    gcc = require_tool("gcc", "apt-get install gcc")
    directory = tmp_path_factory.mktemp("cwd")
    source = directory.parent / "trap.c"
    source.write_text(TRAP_C)
    nested = directory / "nvidia" / "nccl" / "lib"
    nested.mkdir(parents=True)
    for target in (directory / "libnccl.so.2", nested / "libnccl.so.2"):
        subprocess.run([gcc, "-shared", "-fPIC", f'-DMARKER="{directory / "LOADED"}"',
                        "-o", str(target), str(source)], check=True, timeout=120)
    return directory


def _run(argv: list[str], cwd: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), **extra}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_trap_is_real(trap_dir: Path) -> None:
    """The trap's constructor does run when the library is loaded, so its absence below means
    it was not loaded."""
    marker = trap_dir / "LOADED"
    marker.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-c",
                    f"import ctypes; ctypes.CDLL({str(trap_dir / 'libnccl.so.2')!r})"],
                   check=True, timeout=60)
    assert marker.read_text() == "loaded\n"
    marker.unlink()


@pytest.mark.parametrize("entry", ["console-script", "python-m"])
def test_no_library_from_the_current_directory(bare_venv: Path, trap_dir: Path, entry: str) -> None:
    python = str(bare_venv / "bin" / "python")
    prefix = ([str(bare_venv / "bin" / "clusterenv")] if entry == "console-script"
              else [python, "-m", "clusterenv"])
    multi_node = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "NUM_NODES": "2",
                  "NODE_RANK": "0", "NUM_TRAINERS": "1"}
    # LD_LIBRARY_PATH unset, empty, or with an empty entry: each means "here" to the loader.
    runs = [(["doctor"], {}), (["doctor"], {"LD_LIBRARY_PATH": ""}),
            (["env"], {"LD_LIBRARY_PATH": "/nonexistent::/also-nonexistent", **multi_node})]
    for argv, env in runs:
        result = _run([*prefix, *argv], trap_dir, env)
        assert "Traceback" not in result.stderr, result.stderr
        assert not (trap_dir / "LOADED").exists(), (argv, env, result.stdout, result.stderr)
    # The search itself finds nothing here, and nothing from this directory.
    found = _run([python, "-c", "import os, json; from clusterenv.nccl.probe import "
                  "find_nccl_library; s = find_nccl_library(os.environ, ld_cache='/nonexistent');"
                  " print(json.dumps(s.library and s.library.path))"], trap_dir, {})
    assert found.stdout.strip() == "null", found.stderr


def test_a_relative_library_variable_is_refused(trap_dir: Path) -> None:
    """``CLUSTERENV_NCCL_LIBRARY=libnccl.so.2`` names the current directory's file: refused
    with the variable, the value and the fix, and nothing is loaded."""
    cwd = Path.cwd()
    try:
        os.chdir(trap_dir)
        search = find_nccl_library({LIBRARY_VARIABLE: "libnccl.so.2"})
    finally:
        os.chdir(cwd)
    assert search.library is None and search.problem
    assert search.note.startswith("CLUSTERENV_NCCL_LIBRARY='libnccl.so.2' is a relative path")
    assert "absolute path" in search.note


def test_no_launcher_from_the_current_directory(bare_venv: Path, trap_dir: Path) -> None:
    """A ``PATH`` with an empty entry means the current directory to ``shutil.which`` and to
    ``execve`` of a bare name; launch starts neither a ``torchrun`` nor an ``srun`` from there."""
    for name in ("torchrun", "srun"):
        tool = trap_dir / name
        tool.write_text(f"#!/bin/sh\necho started >> {trap_dir / 'LOADED'}\n")
        tool.chmod(0o755)
    clusterenv = str(bare_venv / "bin" / "clusterenv")
    dry = _run([clusterenv, "launch", "--dry-run", "--", "train.py"], trap_dir, {"PATH": ":"})
    assert str(trap_dir) not in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    srun = _run([clusterenv, "launch", "--launcher", "srun", "--force", "--", "true"], trap_dir,
                {"PATH": "/nonexistent:"})
    assert not (trap_dir / "LOADED").exists(), srun.stdout + srun.stderr
    assert srun.returncode != 0
    assert "srun not found" in srun.stderr and "Traceback" not in srun.stderr
