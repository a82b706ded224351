"""A user's script that calls ``clusterenv.bench.run()`` inside its own process group.

Launched by torchrun; every rank writes its result's ``to_dict()`` to ``OUT_DIR/rank-N.json``.

Usage: ``torchrun ... bench_api_step.py OUT_DIR``
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path


def main() -> int:
    """Join the group, measure, write this rank's result; exit 0."""
    import torch.distributed as dist

    from clusterenv import bench

    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    try:
        result = bench.run(sizes=bench.parse_sizes("64K,256K"), iters=2, time_limit=30)
        Path(sys.argv[1], f"rank-{dist.get_rank()}.json").write_text(
            json.dumps(result.to_dict()), encoding="utf-8")
    finally:
        dist.destroy_process_group()
    return 0 if os.environ.get("RANK") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
