"""Reading the files of a git repository at its release tags, without a work tree.

Used by ``tools/nccl_messages.py``: ``ls-tree`` lists the files of a tag, one long-running
``cat-file --batch`` reads each blob once (most files do not change between releases, so their
blobs repeat from tag to tag and are read once).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["Repository"]


class Repository:
    """A git repository (bare or with a work tree) given by its path.

    A directory that is not a git repository is read as one release named ``"worktree"``.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        probe = subprocess.run(["git", "-C", str(self.path), "rev-parse", "--git-dir"],
                               capture_output=True, text=True, check=False)
        self.is_git = probe.returncode == 0
        self._batch: subprocess.Popen[bytes] | None = None

    def tags(self) -> list[str]:
        """Every tag, e.g. ``["v2.12.7-1", ...]`` (``["worktree"]`` for a plain directory)."""
        if not self.is_git:
            return ["worktree"]
        out = self._git("tag")
        return [t for t in out.splitlines() if t]

    def head(self) -> str:
        """The commit checked out or the default branch's, abbreviated (``"4b8ea7f"``)."""
        if not self.is_git:
            return "worktree"
        return self._git("rev-parse", "--short", "HEAD").strip()

    def files(self, ref: str, suffixes: tuple[str, ...]) -> Iterator[tuple[str, str]]:
        """``(path, blob id)`` of every file of ``ref`` ending in one of ``suffixes``."""
        if not self.is_git:
            for found in sorted(self.path.rglob("*")):
                if found.is_file() and found.name.endswith(suffixes):
                    rel = found.relative_to(self.path).as_posix()
                    yield rel, "file:" + rel
            return
        for line in self._git("ls-tree", "-r", "--full-tree", ref).splitlines():
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob" and path.endswith(suffixes):
                yield path, parts[2]

    def read(self, blob: str) -> str:
        """The text of a blob (undecodable bytes replaced)."""
        if blob.startswith("file:"):
            return (self.path / blob[5:]).read_text(encoding="utf-8", errors="replace")
        if self._batch is None:
            self._batch = subprocess.Popen(
                ["git", "-C", str(self.path), "cat-file", "--batch"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )
        if self._batch.stdin is None or self._batch.stdout is None:
            raise RuntimeError("git cat-file has no pipes")
        self._batch.stdin.write(blob.encode() + b"\n")
        self._batch.stdin.flush()
        header = self._batch.stdout.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            return ""
        size = int(header[2])
        data = self._batch.stdout.read(size)
        self._batch.stdout.read(1)  # the newline after the content
        return data.decode("utf-8", errors="replace")

    def close(self) -> None:
        """End the ``cat-file`` process."""
        if self._batch is not None:
            if self._batch.stdin is not None:
                self._batch.stdin.close()
            self._batch.wait()
            self._batch = None

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], capture_output=True,
                              text=True, check=True).stdout
