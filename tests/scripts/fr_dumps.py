"""Real flight-recorder dumps from torch itself, for the ``clusterenv hang`` tests.

Run once per rank (``--rank R --world 3``; a FileStore rendezvous, Gloo on CPU). Every rank
calls, on the default group, ``--agree`` all_reduces, on ``g01 = new_group([0, 1])`` one
all_reduce (ranks 0 and 1) and on ``g12 = new_group([1, 2])`` one broadcast (ranks 1 and 2),
then writes its dump into ``OUT/agree`` (without stacks). Then rank ``--behind`` stops, while
the others enter one more default-group all_reduce and rank 1 one more ``g12`` all_gather, both
asynchronously (they would wait forever), and every rank writes its dump into ``OUT/stall``.
Each dump is
written twice, as torch's two forms: the pickle of ``_dump_fr_trace()`` named as torch names a
dump (``comm_lib_trace_rank_<R>``) and the JSON of ``_dump_fr_trace_json()`` named
``trace-<host>-rank<R>.json``. The last line printed is what the rank entered after the agree
dumps, as JSON: ``{"rank": 1, "entered": [["default", "all_reduce", "fr_dumps.py:64"], ...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path


def write(out: Path, rank: int, *, stacks: bool) -> None:
    from torch._C._distributed_c10d import (  # type: ignore[attr-defined,unused-ignore]
        _dump_fr_trace,
        _dump_fr_trace_json,
    )

    out.mkdir(parents=True, exist_ok=True)
    (out / f"comm_lib_trace_rank_{rank}").write_bytes(_dump_fr_trace(includeStackTraces=stacks))
    (out / "json").mkdir(exist_ok=True)
    (out / "json" / f"trace-fakehost-rank{rank}.json").write_bytes(_dump_fr_trace_json())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--agree", type=int, default=3)
    parser.add_argument("--behind", type=int, default=2)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    store = dist.FileStore(args.store, args.world)  # type: ignore[attr-defined,unused-ignore]
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world,
                            timeout=timedelta(seconds=60))
    rank, out = args.rank, Path(args.out)
    g01 = dist.new_group([0, 1])
    g12 = dist.new_group([1, 2])
    value = torch.ones(4)
    for _ in range(args.agree):
        dist.all_reduce(value)
    if rank in (0, 1):
        dist.all_reduce(value, group=g01)
    if rank in (1, 2):
        dist.broadcast(value, src=1, group=g12)
    write(out / "agree", rank, stacks=False)
    dist.barrier()  # every rank has written its agree dump before any goes on
    entered: list[list[str]] = []
    pending = []
    if rank != args.behind:
        line = sys._getframe().f_lineno + 1
        pending.append(dist.all_reduce(value, async_op=True))
        entered.append(["default", "all_reduce", f"fr_dumps.py:{line}"])
    if rank == 1 and args.behind == 2:
        line = sys._getframe().f_lineno + 1
        pending.append(dist.all_gather([torch.zeros(4), torch.zeros(4)], value, group=g12,
                                       async_op=True))
        entered.append(["g12", "all_gather", f"fr_dumps.py:{line}"])
    write(out / "stall", rank, stacks=True)
    print(json.dumps({"rank": rank, "entered": entered}), flush=True)
    os._exit(0)  # the entered collectives wait for a rank that never comes


if __name__ == "__main__":
    sys.exit(main())
