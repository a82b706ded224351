"""A tiny distributed "training step" for the simulated cluster, launched by torchrun.

Every rank joins the process group (Gloo on CPU, NCCL when CUDA is available), all-reduces
``rank + 1``, checks that the sum is ``n(n+1)/2``, meets the others at a barrier and leaves.
It prints one line per rank and exits 0, or 1 on a wrong sum; a failure to connect surfaces as
torch's own exception (the text the tests look for), so it exits non-zero too.

Usage (one command per node)::

    torchrun --nnodes=2 --nproc-per-node=2 --node-rank=R --rdzv-backend=static \\
        --master-addr=10.65.0.2 --master-port=29500 allreduce_step.py [--timeout 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from datetime import timedelta


def main(argv: Sequence[str] | None = None) -> int:
    """Run one step and return the exit code (0: the sum was right on this rank)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help="process group backend; auto = nccl with CUDA, else gloo")
    parser.add_argument("--timeout", type=float, default=20.0,
                        help="init_process_group timeout in seconds (default 20)")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)

    dist.init_process_group(backend=backend, timeout=timedelta(seconds=args.timeout))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        value = torch.tensor([float(rank + 1)], device=device)
        dist.all_reduce(value)
        total = float(value.item())
        expected = world_size * (world_size + 1) / 2
        dist.barrier()
    finally:
        dist.destroy_process_group()

    verdict = "ok" if total == expected else "MISMATCH"
    line = (
        f"allreduce_step rank={rank} world_size={world_size} backend={backend} "
        f"host={socket.gethostname()} sum={total:g} expected={expected:g} {verdict}\n"
    )
    # One write(2) per line: the ranks of a node share one pipe, and print() may split a line
    # into two writes that another rank's line can land between.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), line.encode())
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
