"""A training loop that hangs on purpose, for ``clusterenv hang`` tests (launched by torchrun).

Every rank joins through :func:`clusterenv.integrations.torch.init_process_group` (Gloo on CPU,
the flight recorder on, dumps on failure), makes a subgroup of the even ranks, then runs steps:
each step is one ``all_reduce`` on the default group (so the step number is the collective's
sequence number there) and, on even ranks, one ``all_reduce`` on the subgroup. Before the
default-group ``all_reduce`` of ``--step``, rank ``--rank`` misbehaves:

- ``skip``: it never calls the collective (sleeps far past every timeout);
- ``die``: it is killed (SIGKILL, as the OOM killer does);
- ``none``: nothing; with ``--steps 0`` the loop runs until killed (for a link cut mid-run).

Each rank prints what it does, one line per event, so a test can check the report against
what the job did::

    hangjob rank=2 node=1 host=node-1 enter step=3 call=hang_job.py:71
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

PROGRESS: list[int] = []  # an O_APPEND descriptor when --progress is given


def say(text: str) -> None:
    """One ``write(2)`` per line: the ranks of a node share one pipe (and the progress file)."""
    line = f"hangjob {text}\n".encode()
    os.write(sys.stdout.fileno(), line)
    for fd in PROGRESS:
        os.write(fd, line)


def main() -> int:
    """Run the loop; exit 0 when every step finished."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("skip", "die", "none"), default="none")
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--step", type=int, default=0)
    parser.add_argument("--steps", type=int, default=5, help="0: until killed")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between steps")
    parser.add_argument("--progress", help="also append every line to this file")
    args = parser.parse_args()
    if args.progress:
        PROGRESS.append(os.open(args.progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))

    import torch
    import torch.distributed as dist

    from clusterenv.integrations.torch import init_process_group

    info = init_process_group(timeout=args.timeout)
    rank, world = info.rank, info.world_size
    node = os.environ.get("GROUP_RANK", "?")
    evens = dist.new_group(list(range(0, world, 2)))
    say(f"rank={rank} node={node} host={socket.gethostname()} ready world={world} "
        f"dump_on_failure={info.dump_on_failure}")
    value = torch.ones(4)
    step = 0
    while args.steps == 0 or step < args.steps:
        step += 1
        if rank == args.rank and step == args.step:
            if args.mode == "skip":
                say(f"rank={rank} node={node} skip step={step}")
                time.sleep(3600)
            elif args.mode == "die":
                say(f"rank={rank} node={node} die step={step}")
                os.kill(os.getpid(), signal.SIGKILL)
        line = sys._getframe().f_lineno + 2  # the all_reduce below
        say(f"rank={rank} node={node} enter step={step} call=hang_job.py:{line}")
        dist.all_reduce(value)
        if rank % 2 == 0:
            dist.all_reduce(value, group=evens)
        say(f"rank={rank} node={node} done step={step}")
        if args.pause:
            time.sleep(args.pause)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
