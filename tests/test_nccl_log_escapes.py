"""`clusterenv nccl-log` on logs with terminal escape sequences (colours), as a colouring log
handler or a terminal capture leaves them: the real captures in tests/data/nccl_logs/real/,
coloured, read as the plain ones are."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clusterenv.nccl_log import nccl_log_findings, parse_nccl_log, read_nccl_log
from clusterenv.nccl_log.ansi import PlainStream, strip_escapes

REAL = sorted((Path(__file__).parent / "data" / "nccl_logs" / "real").glob("*.txt"))


def coloured(line: str) -> str:
    """A line as a colouring handler writes it: the whole line cyan, NCCL's marker bold."""
    return "\x1b[36m" + line.replace(" NCCL ", " \x1b[1mNCCL\x1b[22m ") + "\x1b[0m"


def summary(log: object) -> list[tuple[str, str, str]]:
    return [(f.code, f.severity, f.title) for f in nccl_log_findings(log)]  # type: ignore[arg-type]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_a_coloured_log_reads_as_the_plain_one(path: Path, tmp_path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    plain = parse_nccl_log(lines)
    target = tmp_path / "coloured.log"
    target.write_text("\n".join(map(coloured, lines)) + "\n", encoding="utf-8")
    assert summary(read_nccl_log(target)) == summary(plain)
    assert summary(parse_nccl_log(map(coloured, lines))) == summary(plain)
    assert read_nccl_log(target).ranks == plain.ranks


def test_a_sequence_cut_between_two_reads_is_removed_whole() -> None:
    text = "node1:1:1 [0] NCCL INFO Using network IB\x1b[0m\n" * 50
    for size in (7, 13, 41, 64):
        stream = PlainStream(io.StringIO(text))
        read = "".join(iter(lambda s=stream, n=size: s.read(n), ""))  # type: ignore[misc]
        assert read == strip_escapes(text) == text.replace("\x1b[0m", "")


def test_escapes_only_and_a_lone_escape_are_no_end_of_text() -> None:
    stream = PlainStream(io.StringIO("\x1b[0m" * 10 + "x\n"))
    assert "".join(iter(lambda: stream.read(4), "")) == "x\n"
    # an ESC that starts no sequence stays (it is text, not a colour)
    assert strip_escapes("a\x1b") == "a\x1b" and strip_escapes("plain") == "plain"
