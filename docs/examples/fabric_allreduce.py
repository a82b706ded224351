"""A Fabric job whose nodes, ranks and rendezvous come from clusterenv."""

import lightning as L
import torch
import torch.distributed as dist

from clusterenv.integrations.lightning import ClusterEnvEnvironment

env = ClusterEnvEnvironment()  # reads the cluster once; never writes os.environ
fabric = L.Fabric(accelerator="auto", devices=env.num_trainers, num_nodes=env.num_nodes,
                  strategy="ddp", plugins=[env])
fabric.launch()  # under torchrun (clusterenv launch) the processes already exist
total = fabric.all_reduce(torch.tensor([float(fabric.global_rank + 1)]), reduce_op="sum")
print(f"rank {fabric.global_rank}/{fabric.world_size} on node {fabric.node_rank}: "
      f"sum={total.item():g}", flush=True)
# Leave together: a rank that exits while another still talks to the rendezvous store or Gloo
# can take that rank down with it ("terminate called without an active exception").
fabric.barrier()
dist.destroy_process_group()
