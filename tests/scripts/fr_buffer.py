"""What torch does with the flight-recorder buffer-size variables in its environment.

Prints ``creating`` just before the first process group (Gloo, a world of one, an in-memory
store), then makes three all_reduces and prints ``entries=N``: how many the recorder kept.
With a value torch cannot read, torch 2.13 never gets past ``creating``.
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> int:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import (  # type: ignore[attr-defined,unused-ignore]
        _dump_fr_trace,
    )

    os.write(1, b"creating\n")
    store = dist.HashStore()  # type: ignore[attr-defined,unused-ignore]
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    for _ in range(3):
        dist.all_reduce(torch.ones(2))
    entries = pickle.loads(_dump_fr_trace(includeStackTraces=False))["entries"]
    os.write(1, f"entries={len(entries)}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
