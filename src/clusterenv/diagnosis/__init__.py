"""``doctor()``: everything one node can tell about what will break a multi-node job.

(The module is ``clusterenv.diagnosis`` rather than ``clusterenv.doctor`` so that the submodule
never shadows the ``clusterenv.doctor`` function once imported.)

The checks cover the failure modes of the catalogue that a single node can detect, grouped by
area:

- the cluster contract (``config-*`` and ``worker-*`` codes, from :mod:`clusterenv.config`);
- the NCCL, Gloo and TensorPipe variables the user set, and what the plan would change
  (filter codes from :mod:`clusterenv.filters`, ``ib-*``, ``nccl-*``, ``env-*``);
- socket interfaces (``socket-ifname-unset``, ``gloo-ifname-unset``, ``cluster-interface-*``);
- the rendezvous address and route (``primary-*``, ``node-addr-not-local``,
  ``hostname-loopback``, ``framework-host-ip``);
- RDMA access (``rdma-*``, ``memlock-too-low``, ``gpudirect-*``);
- the host (``gpus-*``, ``shm-too-small``, ``primary-port-in-use``, ``launcher-missing``).

Each finding has a stable code (listed with the error text users search for in the
troubleshooting page), a severity, a title naming the variable, value or interface, the evidence
and a fix. A laptop with nothing set gets no errors.

Example::

    from clusterenv import doctor

    for finding in doctor():
        print(finding)          # "error[primary-addr-management]: PRIMARY_ADDR=172.20.0.9 is ..."
"""

from __future__ import annotations

from clusterenv.diagnosis.judge import (
    CHECK_CODES,
    Diagnosis,
    diagnose_facts,
    diagnose_with_plan,
    doctor,
)

__all__ = ["CHECK_CODES", "Diagnosis", "diagnose_facts", "diagnose_with_plan", "doctor"]
