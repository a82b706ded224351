"""Host snapshots rebuilt from real captures, with what detection must find on each.

Every profile names the capture file it reproduces (``Profile.capture``, a file of the shared
real-capture fixtures) and lists what the capture did not show and the profile had to choose
(``Profile.assumed``). Other tests reuse them::

    from tests.profiles import PROFILES

    root = PROFILES["roce-bond0-ibdev2netdev"].build(tmp_path)
    plan = plan_nccl_env(root=root, ...)
"""

from __future__ import annotations

from . import (
    a100_vf_mt4124_exit255,
    a100_vf_mt4126,
    azure_a100_ibstatus,
    container_bond_no_rdma,
    container_only_uverbs1,
    efa_p5en,
    ib_ndr_bf3_bond_ibstat,
    ib_ndr_bf3_bond_sysfs,
    ib_ndr_cx6dx_some_down,
    ionic_ipv6_only,
    k8s_ib_vf_init,
    roce_4nodes_aihub0008,
    roce_bond0_ibdev2netdev,
    roce_bond_gid_list,
    roce_cx7_12dev_2down,
    roce_cx7_400g_cx6dx_100g,
    roce_cx7_down_polling,
    roce_show_gids,
)
from ._model import CAPTURES_DIR, ExpectedPort, Profile

__all__ = ["CAPTURES_DIR", "PROFILES", "ExpectedPort", "Profile"]

#: Profile name -> profile, one per real capture of a host's RDMA (and a few variants of them, or
#: hosts reported from captures the shared fixtures do not hold; ``Profile.origin`` says which).
PROFILES: dict[str, Profile] = {
    module.PROFILE.name: module.PROFILE
    for module in (
        ib_ndr_bf3_bond_sysfs,
        ib_ndr_bf3_bond_ibstat,
        ib_ndr_cx6dx_some_down,
        roce_cx7_400g_cx6dx_100g,
        roce_cx7_12dev_2down,
        a100_vf_mt4126,
        a100_vf_mt4124_exit255,
        azure_a100_ibstatus,
        efa_p5en,
        container_only_uverbs1,
        container_bond_no_rdma,
        roce_bond0_ibdev2netdev,
        roce_4nodes_aihub0008,
        roce_show_gids,
        roce_bond_gid_list,
        ionic_ipv6_only,
        k8s_ib_vf_init,
        roce_cx7_down_polling,
    )
}
