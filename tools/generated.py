"""Writing a file the tools generate, or checking that it is current (``--check``)."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["write_generated"]


def write_generated(path: Path, text: str, *, check: bool) -> int:
    """Write ``text`` to ``path``; with ``check``, write nothing and return 1 when the file
    differs (else 0), as a CI step would."""
    if check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run without --check", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0
