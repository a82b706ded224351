"""A Python environment for a test, made from this one's packages with some left out.

The README's set-up makes a virtual environment with ``pip install .``: no NCCL wheel, and on
some nodes no torch. Installing one per test would be slow and need the network, so this makes a
``venv --without-pip`` whose site-packages reaches this environment's packages through a ``.pth``
file, minus the ones a test wants absent, plus the source tree.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SRC", "partial_venv"]

SRC = Path(__file__).parents[1] / "src"


def partial_venv(base: Path, *, without: Iterable[str]) -> Path:
    """A virtual environment under ``base`` whose packages are this one's except those whose
    names start with one of ``without`` (e.g. ``("nvidia",)``); returns it. It has a
    ``bin/clusterenv`` console script as pip writes one."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    deps = base / "deps"
    deps.mkdir()
    left_out = tuple(name.lower() for name in without)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(left_out) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    [site_packages] = (venv / "lib").glob("python*/site-packages")
    (site_packages / "deps.pth").write_text(f"{deps}\n{SRC}\n")
    script = venv / "bin" / "clusterenv"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n"
                      "from clusterenv.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return venv
