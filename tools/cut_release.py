"""Cut a release: fold CHANGELOG.md's ``[Unreleased]`` into a dated section and set the version.

Run from the repository root: ``python tools/cut_release.py 0.1.0 [2026-12-02]`` (the date
defaults to today). The ``[Unreleased]`` section's entries move, in their order, into
``## [VERSION] - DATE`` under one heading of each kind (Keep a Changelog's order: Added,
Changed, Deprecated, Removed, Fixed, Security), however many times a kind was opened while the
changes were written; ``[Unreleased]`` stays, empty, above it; the compare links at the end are
rewritten; ``pyproject.toml`` and ``clusterenv.__version__`` get VERSION. tests/test_release.py
checks the result.
"""

from __future__ import annotations

import argparse
import datetime
import re
from pathlib import Path

KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
REPOSITORY = "https://github.com/clusterenv/clusterenv"
_HEADING = re.compile(r"^### (\w+)\s*$")
_LINK = re.compile(r"^\[[^\]]+\]: ")


def fold(text: str, version: str, date: str) -> str:
    """``text`` (a changelog) with its ``[Unreleased]`` entries in a section for ``version``."""
    head, marker, rest = text.partition("## [Unreleased]")
    if not marker:
        raise SystemExit("CHANGELOG.md has no '## [Unreleased]' section")
    unreleased, _, older = rest.partition("\n## [")
    older = "## [" + older if older else ""
    entries: dict[str, list[str]] = {kind: [] for kind in KINDS}
    kind: str | None = None
    for line in unreleased.splitlines():
        match = _HEADING.match(line)
        if match:
            kind = match.group(1)
            if kind not in entries:
                raise SystemExit(f"CHANGELOG.md: unknown heading '### {kind}'; expected one of "
                                 f"{', '.join(KINDS)}")
        elif _LINK.match(line):
            continue  # the old compare links: rewritten below
        elif line.startswith("- ") and kind is not None:
            entries[kind].append(line)
        elif line.strip() and kind is not None and entries[kind]:
            entries[kind][-1] += "\n" + line  # an entry's continuation
    older_links = [line for line in older.splitlines() if _LINK.match(line)
                   and not line.startswith("[Unreleased]")]
    older = "\n".join(line for line in older.splitlines() if not _LINK.match(line)).strip()
    parts = [head.rstrip() + "\n", "## [Unreleased]\n", f"## [{version}] - {date}\n"]
    parts += [f"### {name}\n\n" + "\n".join(items) + "\n" for name, items in entries.items()
              if items]
    if older:
        parts.append(older + "\n")
    parts.append("\n".join([f"[Unreleased]: {REPOSITORY}/compare/v{version}...HEAD",
                            f"[{version}]: {REPOSITORY}/releases/tag/v{version}",
                            *older_links]) + "\n")
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="e.g. 0.1.0")
    parser.add_argument("date", nargs="?", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", args.version):
        raise SystemExit(f"version {args.version!r}: expected MAJOR.MINOR.PATCH, e.g. 0.1.0")
    changelog = Path("CHANGELOG.md")
    changelog.write_text(fold(changelog.read_text(encoding="utf-8"), args.version, args.date),
                         encoding="utf-8")
    for path, pattern, replacement in (
        (Path("pyproject.toml"), r'^version = "[^"]*"$', f'version = "{args.version}"'),
        (Path("src/clusterenv/__init__.py"), r'^__version__ = "[^"]*"$',
         f'__version__ = "{args.version}"'),
    ):
        text, count = re.subn(pattern, replacement, path.read_text(encoding="utf-8"),
                              count=1, flags=re.MULTILINE)
        if count != 1:
            raise SystemExit(f"{path}: no version line matching {pattern}")
        path.write_text(text, encoding="utf-8")
    print(f"CHANGELOG.md, pyproject.toml and clusterenv.__version__: {args.version} ({args.date})")


if __name__ == "__main__":
    main()
