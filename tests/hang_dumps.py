"""Real flight-recorder dumps for the ``clusterenv hang`` tests, made by torch itself.

:func:`generate` runs ``tests/scripts/fr_dumps.py`` as three Gloo ranks (a FileStore
rendezvous, no network namespaces) and returns where the dumps are and what each rank did, as
the ranks themselves printed it. Nothing here writes a dump: every byte comes from torch's
``_dump_fr_trace()`` / ``_dump_fr_trace_json()``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "fr_dumps.py"
WORLD = 3
BEHIND = 2


@dataclass(frozen=True)
class Generated:
    """The dumps of one run.

    Attributes:
        agree: Pickles after every rank made the same calls (``comm_lib_trace_rank_<R>``),
            and their JSON twins under ``agree/json``.
        stall: Pickles after rank :data:`BEHIND` stopped and the others entered one more
            collective, and their JSON twins under ``stall/json``.
        entered: Rank -> ``[(group, operation, "fr_dumps.py:LINE"), ...]`` it entered after
            the agree dumps, as the rank printed it.
    """

    agree: Path
    stall: Path
    entered: dict[int, list[tuple[str, str, str]]]


def generate(out: Path, timeout: float = 180.0) -> Generated:
    """Run the three ranks and collect what they did."""
    store = out / "store"
    procs = [subprocess.Popen(
        [sys.executable, str(SCRIPT), "--rank", str(rank), "--world", str(WORLD), "--store",
         str(store), "--out", str(out), "--behind", str(BEHIND)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) for rank in range(WORLD)]
    entered: dict[int, list[tuple[str, str, str]]] = {}
    problems = []
    for rank, proc in enumerate(procs):
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        if proc.returncode != 0:
            problems.append(f"rank {rank}: exit {proc.returncode}\n{stderr[-2000:]}")
            continue
        did = json.loads(stdout.strip().splitlines()[-1])
        entered[did["rank"]] = [tuple(item) for item in did["entered"]]
    if problems:
        raise RuntimeError("\n".join(problems))
    return Generated(out / "agree", out / "stall", entered)
