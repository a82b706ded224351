"""All-reduce one number per rank: runs alone, under torchrun, or across nodes."""

import torch
import torch.distributed as dist

from clusterenv.integrations.torch import init_process_group

info = init_process_group(timeout=60)  # NCCL with CUDA, else Gloo; the cluster's settings
value = torch.tensor([float(info.rank + 1)], device=info.device)
dist.all_reduce(value)
expected = info.world_size * (info.world_size + 1) / 2
print(f"rank {info.rank}/{info.world_size} ({info.backend} on {info.device}): "
      f"sum={value.item():g} expected={expected:g}", flush=True)
dist.destroy_process_group()
