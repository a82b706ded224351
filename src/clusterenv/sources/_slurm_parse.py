"""Pure parsers for Slurm's compressed formats: host lists and per-node counts.

Host lists (``SLURM_JOB_NODELIST``, ``SLURM_STEP_NODELIST``, ``SLURM_NODELIST``) follow
``hostlist_create`` in Slurm's ``src/common/hostlist.h``: items separated by ``,`` or whitespace
(outside brackets); each item ``prefix[ranges]suffix`` where ranges are ``a-b`` or single
numbers separated by ``,``; leading zeros fix the width (``node[0000-1023]``); several bracket
groups in one name expand as a product, the first group outermost (``rack[1-2]-node[01-02]`` is
``rack1-node01, rack1-node02, rack2-node01, rack2-node02``); text after a bracket is kept
(``gpu[001-002]-ib``). The order is Slurm's node order, never sorted.

Per-node counts (``SLURM_TASKS_PER_NODE``, ``SLURM_STEP_TASKS_PER_NODE``,
``SLURM_JOB_CPUS_PER_NODE``) are ``count[(xN)]`` items separated by ``,``: ``8(x2),4`` is
``[8, 8, 4]``. ``int()`` fails on them, which is how several projects broke.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HOSTS", "expand_hostlist", "parse_counts_per_node"]

#: The most hosts a list may expand to; larger values are refused rather than expanded.
MAX_HOSTS = 100_000

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_COUNT = re.compile(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?")


def _split_items(text: str) -> list[str]:
    """Split at ``,`` and whitespace that are outside brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            if depth:
                raise ValueError("nested '[' in a host list")
            depth = 1
        elif char == "]":
            if not depth:
                raise ValueError("']' without '['")
            depth = 0
        if not depth and (char == "," or char.isspace()):
            if current:
                items.append("".join(current))
            current = []
            continue
        current.append(char)
    if depth:
        raise ValueError("'[' without ']'")
    if current:
        items.append("".join(current))
    return items


def _expand_ranges(body: str) -> list[str]:
    """``01-03,07`` -> ``["01", "02", "03", "07"]`` (width from the lower bound)."""
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"bad range {part!r} in '[{body}]'")
        low_text, high_text = match.group(1), match.group(2)
        if len(low_text) > 9 or (high_text is not None and len(high_text) > 9):
            raise ValueError(f"range {part!r} is too large")
        low = int(low_text)
        high = low if high_text is None else int(high_text)
        if high < low:
            raise ValueError(f"range {part!r} runs backwards")
        if len(out) + high - low + 1 > MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
        width = len(low_text)
        out.extend(str(n).zfill(width) for n in range(low, high + 1))
    return out


def _expand_item(item: str) -> list[str]:
    names = [""]
    rest = item
    while rest:
        start = rest.find("[")
        if start < 0:
            names = [n + rest for n in names]
            break
        end = rest.index("]", start)
        prefix, body, rest = rest[:start], rest[start + 1 : end], rest[end + 1 :]
        values = _expand_ranges(body)
        if len(names) * len(values) > MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
        names = [n + prefix + v for n in names for v in values]
    return names


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list, in Slurm's order.

    Example::

        expand_hostlist("gpu-[01-02,07],cpu1")  # ['gpu-01', 'gpu-02', 'gpu-07', 'cpu1']

    Raises:
        ValueError: Unbalanced or nested brackets, a bad or backwards range, an empty list, or
            more than :data:`MAX_HOSTS` hosts.
    """
    hosts: list[str] = []
    for item in _split_items(text):
        hosts.extend(_expand_item(item))
        if len(hosts) > MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
    if not hosts:
        raise ValueError("the host list is empty")
    return hosts


def parse_counts_per_node(text: str) -> list[int]:
    """Expand Slurm's compressed per-node counts: ``"8(x2),4"`` -> ``[8, 8, 4]``.

    Raises:
        ValueError: Anything but ``count[(xN)]`` items separated by ``,``, or more than
            :data:`MAX_HOSTS` nodes.
    """
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _COUNT.fullmatch(part.strip())
        if match is None:
            raise ValueError(f"bad item {part!r}: expected COUNT or COUNT(xNODES)")
        repeat = 1 if match.group(2) is None else int(match.group(2))
        if repeat < 1 or len(counts) + repeat > MAX_HOSTS:
            raise ValueError(f"bad repeat in {part!r}")
        counts.extend([int(match.group(1))] * repeat)
    return counts
