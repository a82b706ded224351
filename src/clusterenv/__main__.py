"""``python -m clusterenv`` runs the CLI.

``python -m`` puts the current directory first on ``sys.path``, so any module a verb imports
later (``torch``, ``lightning``, a namespace package such as ``nvidia``) could come from
whatever directory the user is in. It is taken off again, as ``python -P`` would, unless
clusterenv itself was imported from there (a source checkout run from ``src/``).
"""

import os
import sys
from pathlib import Path

import clusterenv


def _drop_current_directory() -> None:
    if getattr(sys.flags, "safe_path", False) or not sys.path:  # python -P (3.11+)
        return
    first = sys.path[0]
    try:
        here = Path(first or os.curdir).resolve()
        if here != Path.cwd().resolve() or Path(clusterenv.__file__).resolve().parents[1] == here:
            return
    except (OSError, IndexError):
        return
    del sys.path[0]


_drop_current_directory()

from clusterenv.cli import main  # noqa: E402  # after sys.path is safe

raise SystemExit(main())
