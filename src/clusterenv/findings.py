"""Findings and the one registry of their codes.

:class:`Finding` is the result type shared by ``doctor``, the NCCL plan, the filter lint, the
cluster contract, ``launch``, ``nccl-log`` and ``preflight``. :data:`CODES` declares every code
they can emit, once, with its default severity and a generic title; each code has an entry in
the troubleshooting page. Code that emits a finding builds it with :meth:`Finding.of`, which
takes the severity from :data:`CODES`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CODES",
    "SEVERITIES",
    "Area",
    "Code",
    "CodeInfo",
    "Finding",
    "Severity",
    "code_info",
    "codes_of",
    "has_errors",
    "sort_findings",
]

#: How bad a finding is: ``error`` will break or silently degrade the job, ``warning`` probably
#: will, ``info`` is worth knowing.
Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

#: The part of clusterenv that emits a code: ``doctor`` (the plan and the single-node checks),
#: ``filters`` (the lint of filter values), ``config`` (the cluster contract and worker
#: cross-checks), ``launch``, ``nccl-log``, ``preflight`` and ``bench``.
Area = Literal["doctor", "filters", "config", "launch", "nccl-log", "preflight", "bench"]


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """What a finding code means.

    Attributes:
        area: The part that emits it, e.g. ``"doctor"``.
        severity: Its default severity, e.g. ``"error"``; a few checks raise or lower it for a
            particular case (the troubleshooting page says when).
        title: A generic title, e.g. ``"The cluster interface is down"``; findings carry a
            specific one naming the variable, value or device.
    """

    area: Area
    severity: Severity
    title: str


#: Every finding code, as a type: ``Finding.of("socket-ifname-unsett")`` is a type error.
#: It lists exactly the keys of :data:`CODES` (a test holds the two together).
Code = Literal[
    "socket-ifname-unset",
    "gloo-ifname-unset",
    "cluster-interface-down",
    "cluster-interface-no-ipv4",
    "cluster-interface-management",
    "cluster-interface-unknown",
    "ifname-not-cluster",
    "framework-host-ip",
    "nccl-bootstrap-disagrees",
    "nccl-probe-failed",
    "flight-recorder-off",
    "flight-recorder-invalid",
    "filter-selects-avoided",
    "filter-leaves-avoided",
    "filter-ip-address",
    "filter-matches-nothing",
    "filter-prefix-collision",
    "filter-prefix-multiple",
    "filter-modifier-repeated",
    "filter-modifier-order",
    "filter-port-on-socket",
    "filter-bad-port",
    "filter-ignored-short",
    "filter-empty-list",
    "filter-too-many-tokens",
    "filter-whitespace",
    "filter-token-unmatched",
    "ifname-nccl-syntax",
    "ifname-no-such-interface",
    "ifname-ip-address",
    "ifname-multiple",
    "ifname-ignored-short",
    "primary-addr-management",
    "primary-name-unresolvable",
    "primary-name-unverified",
    "primary-route-management",
    "primary-route-not-cluster",
    "primary-unreachable",
    "file-too-large",
    "primary-zone-unknown",
    "node-addr-not-local",
    "primary-rank-mismatch",
    "hostname-loopback",
    "primary-port-in-use",
    "launcher-missing",
    "cluster-variables-missing",
    "plan-config-invalid",
    "gpus-too-few",
    "gpus-none-visible",
    "shm-too-small",
    "config-unknown-source",
    "config-missing",
    "config-alias-mismatch",
    "config-not-integer",
    "config-out-of-range",
    "config-bad-address",
    "config-node-rank",
    "config-world-size",
    "config-loopback-primary",
    "config-loopback-node",
    "config-host-node-addr",
    "config-primary-rank",
    "config-rank-range",
    "config-uneven-nodes",
    "config-rank-layout",
    "config-elastic-range",
    "config-invalid",
    "worker-more-processes",
    "worker-fewer-processes",
    "worker-node-count",
    "worker-node-rank",
    "worker-primary-addr",
    "runpod-gpu-count",
    "launch-torchrun-missing",
    "launch-nproc-exceeds-gpus",
    "launch-nproc-differs",
    "rdma-not-openable",
    "rdma-no-libibverbs",
    "rdma-port-init",
    "rdma-port-down",
    "rdma-port-armed",
    "memlock-too-low",
    "gpudirect-unavailable",
    "gpudirect-old-nccl",
    "ib-disabled",
    "ib-hca-mixed-fabric",
    "ib-hca-excluded",
    "ib-gid-index-wrong",
    "ib-gid-index-invalid",
    "ib-gid-index-unneeded",
    "ib-gid-index-disagree",
    "ib-gid-index-info",
    "ib-gid-link-local",
    "ib-gid-missing",
    "ib-gid-setting-ignored",
    "ib-gid-roce-v1",
    "env-deprecated",
    "env-no-such-timeout",
    "hang-detection-disabled",
    "ignore-net-mismatch",
    "nccl-debug-knob",
    "nccl-net-contradiction",
    "nccl-ib-setting-range",
    "log-socket-fallback",
    "log-ib-disabled",
    "log-bootstrap-management",
    "log-mixed-transport",
    "log-mixed-interface",
    "log-mixed-version",
    "log-mixed-env",
    "log-gdr-disabled",
    "log-ibverbs-failure",
    "log-plugin-failed",
    "log-connect-timeout",
    "log-ib-qp-failure",
    "log-ib-memlock",
    "log-shm-exhausted",
    "log-open-files",
    "log-init-unfinished",
    "log-shared-address",
    "log-no-interface",
    "log-nccl-error",
    "log-nccl-warning",
    "log-ib-completion-error",
    "log-ib-setting-range",
    "log-mixed-link-layer",
    "log-socket-channel-unroutable",
    "log-ofi-no-provider",
    "log-mixed-plugin",
    "log-mixed-subnet",
    "log-mixed-fact",
    "log-mixed-rdma-driver",
    "log-peer-closed",
    "log-address-family",
    "log-plugin-load",
    "log-nccl-message",
    "preflight-rank-duplicate",
    "preflight-rank-unknown",
    "preflight-rank-out-of-range",
    "preflight-rank-missing",
    "preflight-contract-differs",
    "preflight-env-differs",
    "preflight-no-cluster-interface",
    "preflight-mtu-differs",
    "preflight-interface-differs",
    "preflight-transport-differs",
    "preflight-rdma-ports-differ",
    "preflight-rdma-rate-differs",
    "preflight-gid-differs",
    "preflight-gpu-count",
    "preflight-node-errors",
    "preflight-version-differs",
    "preflight-token-mismatch",
    "preflight-addr-mismatch",
    "preflight-ring-unreachable",
    "preflight-rejected-peers",
    "preflight-fingerprint-trimmed",
    "preflight-nccl-library-differs",
    "preflight-net-plugin-differs",
    "preflight-hca-selection-differs",
    "preflight-gpu-model-differs",
    "preflight-driver-differs",
    "preflight-host-limits-differ",
    "preflight-datacenter-differs",
    "bench-slow-node",
    "bench-slow-link",
    "bench-transport-mixed",
    "bench-below-line-rate",
    "bench-one-rank",
]


#: Every finding code clusterenv can emit, in the order of the troubleshooting page.
CODES: dict[Code, CodeInfo] = {
    # -- doctor
    "socket-ifname-unset": CodeInfo(
        "doctor", "error", "NCCL_SOCKET_IFNAME is unset and NCCL would not pick the cluster NIC"
    ),
    "gloo-ifname-unset": CodeInfo(
        "doctor", "error", "GLOO_SOCKET_IFNAME is unset; the host name is not a cluster address"
    ),
    "cluster-interface-down": CodeInfo("doctor", "error", "The cluster interface is down"),
    "cluster-interface-no-ipv4": CodeInfo(
        "doctor", "error", "The cluster interface has no IPv4 address yet"
    ),
    "cluster-interface-management": CodeInfo(
        "doctor", "error", "The cluster address is on the management network"
    ),
    "cluster-interface-unknown": CodeInfo(
        "doctor", "warning", "No interface holds the cluster address, so none can be chosen"
    ),
    "ifname-not-cluster": CodeInfo(
        "doctor", "warning", "A socket variable selects another interface than the cluster one"
    ),
    "framework-host-ip": CodeInfo(
        "doctor", "error", "A framework's host address is not this node's cluster address"
    ),
    "nccl-bootstrap-disagrees": CodeInfo(
        "doctor", "warning", "NCCL itself bootstraps on another interface than predicted"
    ),
    "nccl-probe-failed": CodeInfo(
        "doctor", "warning", "NCCL could not be asked for its bootstrap interface"
    ),
    "flight-recorder-off": CodeInfo(
        "doctor", "info", "PyTorch's flight recorder is off: a hang leaves no record"
    ),
    "flight-recorder-invalid": CodeInfo(
        "doctor", "error", "A flight-recorder buffer size that PyTorch cannot read"
    ),
    # -- filters
    "filter-selects-avoided": CodeInfo(
        "filters", "error", "The value selects an interface or device to avoid"
    ),
    "filter-leaves-avoided": CodeInfo(
        "filters", "warning", "The exclusion list leaves the management interface eligible"
    ),
    "filter-ip-address": CodeInfo(
        "filters", "error", "An IP address where NCCL expects interface names"
    ),
    "filter-matches-nothing": CodeInfo(
        "filters", "error", "The value matches nothing on this host"
    ),
    "filter-prefix-collision": CodeInfo(
        "filters", "warning", "A prefix token also matches longer names"
    ),
    "filter-prefix-multiple": CodeInfo(
        "filters", "warning", "A socket prefix matches several interfaces"
    ),
    "filter-modifier-repeated": CodeInfo(
        "filters", "error", "A modifier on a later token is a literal character"
    ),
    "filter-modifier-order": CodeInfo(
        "filters", "error", "An '=' before '^' makes an exact name that matches nothing"
    ),
    "filter-port-on-socket": CodeInfo(
        "filters", "warning", "A ':port' suffix means nothing for sockets"
    ),
    "filter-bad-port": CodeInfo("filters", "warning", "An NCCL_IB_HCA port field is not a number"),
    "filter-ignored-short": CodeInfo(
        "filters", "warning", "A one-character NCCL_SOCKET_IFNAME is ignored"
    ),
    "filter-empty-list": CodeInfo("filters", "error", "The value has modifiers but no names"),
    "filter-too-many-tokens": CodeInfo(
        "filters", "warning", "NCCL drops the tokens past its limit"
    ),
    "filter-whitespace": CodeInfo(
        "filters", "warning", "A token has spaces, which NCCL does not trim"
    ),
    "filter-token-unmatched": CodeInfo(
        "filters", "warning", "A token of the include list matches nothing here"
    ),
    "ifname-nccl-syntax": CodeInfo(
        "filters", "error", "NCCL filter syntax in a variable that takes exact interface names"
    ),
    "ifname-no-such-interface": CodeInfo("filters", "error", "No interface has that exact name"),
    "ifname-ip-address": CodeInfo(
        "filters", "error", "An IP address where an interface name is expected"
    ),
    "ifname-multiple": CodeInfo(
        "filters", "error", "TP_SOCKET_IFNAME takes exactly one interface name"
    ),
    "ifname-ignored-short": CodeInfo(
        "filters", "warning", "A one-character GLOO_SOCKET_IFNAME is ignored"
    ),
    # -- doctor
    "primary-addr-management": CodeInfo(
        "doctor", "error", "The rendezvous address is a management address"
    ),
    "primary-name-unresolvable": CodeInfo(
        "doctor", "error", "The rendezvous host name does not resolve"
    ),
    "primary-name-unverified": CodeInfo(
        "doctor", "warning", "The rendezvous host name could not be resolved here"
    ),
    "primary-route-management": CodeInfo(
        "doctor", "error", "The route to the rendezvous address uses the management interface"
    ),
    "primary-route-not-cluster": CodeInfo(
        "doctor", "warning", "The route to the rendezvous address avoids the cluster interface"
    ),
    "primary-unreachable": CodeInfo("doctor", "error", "No route to the rendezvous address"),
    "file-too-large": CodeInfo(
        "doctor", "warning", "A file was too large to read, so checks that need it were skipped"
    ),
    "primary-zone-unknown": CodeInfo(
        "doctor", "error", "The rendezvous address's IPv6 zone names no interface here"
    ),
    "node-addr-not-local": CodeInfo(
        "doctor", "warning", "NODE_ADDR is not an address of this node"
    ),
    "primary-rank-mismatch": CodeInfo(
        "doctor", "error", "The node holding the rendezvous address is not rank 0"
    ),
    "hostname-loopback": CodeInfo(
        "doctor", "warning", "The host name resolves to a loopback address"
    ),
    "primary-port-in-use": CodeInfo("doctor", "error", "The rendezvous port is already in use"),
    "launcher-missing": CodeInfo(
        "doctor", "info", "No per-process ranks: the script needs a launcher"
    ),
    "cluster-variables-missing": CodeInfo(
        "doctor", "warning", "No cluster variable is set on a host that looks like a cluster node"
    ),
    "plan-config-invalid": CodeInfo(
        "doctor", "warning", "The cluster environment is invalid: nothing is planned"
    ),
    "gpus-too-few": CodeInfo("doctor", "error", "More processes per node than visible GPUs"),
    "gpus-none-visible": CodeInfo("doctor", "warning", "No GPU is visible"),
    "shm-too-small": CodeInfo("doctor", "error", "Shared memory is too small for NCCL"),
    # -- config
    "config-unknown-source": CodeInfo("config", "error", "Unknown cluster environment source"),
    "config-missing": CodeInfo("config", "error", "A required variable is unset"),
    "config-alias-mismatch": CodeInfo("config", "error", "Two spellings of one value disagree"),
    "config-not-integer": CodeInfo(
        "config", "error", "A rank, count or port is not a decimal integer"
    ),
    "config-out-of-range": CodeInfo("config", "error", "A number is outside its range"),
    "config-bad-address": CodeInfo("config", "error", "An address variable is not a valid address"),
    "config-node-rank": CodeInfo("config", "error", "NODE_RANK is outside [0, NUM_NODES)"),
    "config-world-size": CodeInfo("config", "error", "WORLD_SIZE does not count processes"),
    "config-loopback-primary": CodeInfo(
        "config", "error", "The rendezvous address is loopback on a multi-node job"
    ),
    "config-loopback-node": CodeInfo(
        "config", "error", "This node's address is loopback on a multi-node job"
    ),
    "config-host-node-addr": CodeInfo(
        "config", "error", "HOST_NODE_ADDR is not PRIMARY_ADDR:PRIMARY_PORT"
    ),
    "config-primary-rank": CodeInfo("config", "error", "Rank 0 and the primary node disagree"),
    "config-rank-range": CodeInfo("config", "error", "A worker's rank is out of range"),
    "config-uneven-nodes": CodeInfo(
        "config", "error", "The nodes run different numbers of processes"
    ),
    "config-rank-layout": CodeInfo(
        "config", "error", "The ranks do not give this node's index"
    ),
    "config-elastic-range": CodeInfo(
        "config", "error", "An elastic node range has no fixed node count"
    ),
    "config-invalid": CodeInfo("config", "error", "The cluster environment is invalid"),
    "worker-more-processes": CodeInfo(
        "config", "warning", "More worker processes on this node than GPUs"
    ),
    "worker-fewer-processes": CodeInfo(
        "config", "info", "Fewer worker processes on this node than GPUs"
    ),
    "worker-node-count": CodeInfo(
        "config", "warning", "The launcher's node count disagrees with the provider's"
    ),
    "worker-node-rank": CodeInfo(
        "config", "warning", "The launcher's node rank disagrees with the provider's"
    ),
    "worker-primary-addr": CodeInfo(
        "config", "warning", "The worker's rendezvous address is not the provider's primary"
    ),
    "runpod-gpu-count": CodeInfo(
        "config", "warning", "The Runpod pod's GPU count disagrees with the cluster contract"
    ),
    # -- launch
    "launch-torchrun-missing": CodeInfo(
        "launch", "error", "torchrun is not installed for this Python"
    ),
    "launch-nproc-exceeds-gpus": CodeInfo(
        "launch", "warning", "The launch would start more processes than visible GPUs"
    ),
    "launch-nproc-differs": CodeInfo(
        "launch", "info", "The launch uses another process count than NUM_TRAINERS"
    ),
    # -- doctor
    "rdma-not-openable": CodeInfo(
        "doctor", "warning", "RDMA devices cannot be opened from this process"
    ),
    "rdma-no-libibverbs": CodeInfo("doctor", "warning", "libibverbs is not installed"),
    "rdma-port-init": CodeInfo(
        "doctor", "warning", "An RDMA port is stuck in INIT: no subnet manager configured it"
    ),
    "rdma-port-down": CodeInfo("doctor", "warning", "An RDMA port is DOWN: no link"),
    "rdma-port-armed": CodeInfo("doctor", "warning", "An RDMA port is ARMED, not yet ACTIVE"),
    "memlock-too-low": CodeInfo("doctor", "error", "The locked-memory limit is too low for RDMA"),
    "gpudirect-unavailable": CodeInfo("doctor", "warning", "No GPUDirect RDMA peer-memory module"),
    "gpudirect-old-nccl": CodeInfo("doctor", "warning", "This NCCL may not detect GPUDirect RDMA"),
    "ib-disabled": CodeInfo(
        "doctor", "warning", "NCCL_IB_DISABLE forces TCP although RDMA is usable"
    ),
    "ib-hca-mixed-fabric": CodeInfo("doctor", "warning", "Usable RDMA ports are on two fabrics"),
    "ib-hca-excluded": CodeInfo("doctor", "info", "RDMA ports left out of NCCL_IB_HCA"),
    "ib-gid-index-wrong": CodeInfo(
        "doctor", "error", "NCCL_IB_GID_INDEX points at an unusable GID"
    ),
    "ib-gid-index-invalid": CodeInfo("doctor", "error", "NCCL_IB_GID_INDEX is not a number"),
    "ib-gid-index-unneeded": CodeInfo(
        "doctor", "info", "NCCL_IB_GID_INDEX is not needed with this NCCL"
    ),
    "ib-gid-index-disagree": CodeInfo(
        "doctor", "error", "The RoCE ports keep their GID at different indexes"
    ),
    "ib-gid-index-info": CodeInfo(
        "doctor", "info", "NCCL_IB_GID_INDEX left unset: the NCCL version is unknown"
    ),
    "ib-gid-link-local": CodeInfo(
        "doctor", "error", "NCCL will use a link-local RoCE GID, which reaches no other node"
    ),
    "ib-gid-missing": CodeInfo("doctor", "error", "NCCL will use an empty RoCE GID slot"),
    "ib-gid-setting-ignored": CodeInfo(
        "doctor", "warning", "NCCL ignores or cannot match a RoCE GID setting"
    ),
    "ib-gid-roce-v1": CodeInfo(
        "doctor", "warning", "NCCL will use a RoCE v1 GID, which is not routed"
    ),
    "env-deprecated": CodeInfo("doctor", "warning", "A deprecated variable name"),
    "env-no-such-timeout": CodeInfo(
        "doctor", "warning", "NCCL_TIMEOUT is read by neither NCCL nor PyTorch"
    ),
    "hang-detection-disabled": CodeInfo(
        "doctor", "info", "PyTorch's hang detection is switched off"
    ),
    "ignore-net-mismatch": CodeInfo(
        "doctor", "warning", "NCCL_IGNORE_NET_MISMATCH turns a network mismatch into a hang"
    ),
    "nccl-debug-knob": CodeInfo("doctor", "warning", "An NCCL debugging knob is left set"),
    "nccl-net-contradiction": CodeInfo(
        "doctor", "warning", "NCCL_NET=Socket contradicts NCCL_IB_HCA"
    ),
    "nccl-ib-setting-range": CodeInfo(
        "doctor", "error", "An NCCL_IB_* queue-pair setting is outside what verbs accepts"
    ),
    # -- nccl-log
    "log-socket-fallback": CodeInfo(
        "nccl-log", "error", "NCCL fell back to TCP sockets although RDMA was there"
    ),
    "log-ib-disabled": CodeInfo(
        "nccl-log", "info", "NCCL used sockets on purpose (NCCL_IB_DISABLE)"
    ),
    "log-bootstrap-management": CodeInfo(
        "nccl-log", "warning", "NCCL bootstraps on an interface other hosts may not reach"
    ),
    "log-mixed-transport": CodeInfo("nccl-log", "error", "Ranks use different NCCL transports"),
    "log-mixed-interface": CodeInfo(
        "nccl-log", "warning", "Ranks bootstrap on differently named interfaces"
    ),
    "log-mixed-version": CodeInfo("nccl-log", "error", "Ranks run different NCCL versions"),
    "log-mixed-env": CodeInfo("nccl-log", "warning", "Ranks were given different NCCL settings"),
    "log-gdr-disabled": CodeInfo("nccl-log", "warning", "GPUDirect RDMA is disabled"),
    "log-ibverbs-failure": CodeInfo(
        "nccl-log", "error", "NCCL could not open or use an RDMA device"
    ),
    "log-plugin-failed": CodeInfo("nccl-log", "warning", "An NCCL net plugin failed to load"),
    "log-connect-timeout": CodeInfo("nccl-log", "error", "Peers did not accept NCCL's connections"),
    "log-ib-qp-failure": CodeInfo("nccl-log", "error", "An RDMA queue pair failed"),
    "log-ib-memlock": CodeInfo("nccl-log", "error", "RDMA memory registration failed"),
    "log-shm-exhausted": CodeInfo("nccl-log", "error", "NCCL's shared memory is exhausted"),
    "log-open-files": CodeInfo("nccl-log", "error", "A process ran out of file descriptors"),
    "log-init-unfinished": CodeInfo(
        "nccl-log", "warning", "NCCL's initialisation started and did not finish in the log"
    ),
    "log-shared-address": CodeInfo(
        "nccl-log", "error", "Several hosts bootstrap NCCL from the same address"
    ),
    "log-no-interface": CodeInfo("nccl-log", "error", "NCCL found no usable socket interface"),
    "log-nccl-error": CodeInfo("nccl-log", "error", "An NCCL call failed"),
    "log-nccl-warning": CodeInfo(
        "nccl-log", "warning", "NCCL warnings that are not in the catalogue of its messages"
    ),
    "log-ib-completion-error": CodeInfo(
        "nccl-log", "error", "An RDMA transfer failed with an ibverbs completion error"
    ),
    "log-ib-setting-range": CodeInfo(
        "nccl-log", "error", "An NCCL_IB_* queue-pair setting is outside what verbs accepts"
    ),
    "log-mixed-link-layer": CodeInfo(
        "nccl-log", "warning", "RoCE and InfiniBand ports in one NCCL device list"
    ),
    "log-socket-channel-unroutable": CodeInfo(
        "nccl-log", "error", "NCCL's socket channels use an interface other hosts cannot reach"
    ),
    "log-ofi-no-provider": CodeInfo(
        "nccl-log", "error", "libfabric found no usable device for the provider"
    ),
    "log-mixed-plugin": CodeInfo(
        "nccl-log", "warning", "A network plugin loaded on some processes and not on others"
    ),
    "log-mixed-subnet": CodeInfo(
        "nccl-log", "error", "Processes bootstrap from different subnets"
    ),
    "log-mixed-fact": CodeInfo(
        "nccl-log", "warning", "Processes differ in a fact NCCL needs shared"
    ),
    "log-mixed-rdma-driver": CodeInfo(
        "nccl-log", "warning", "RDMA ports of another driver in one NCCL device list"
    ),
    "log-peer-closed": CodeInfo(
        "nccl-log", "error", "A peer closed its connection (Connection closed by remote peer)"
    ),
    "log-address-family": CodeInfo(
        "nccl-log", "error", "NCCL received an address that is neither IPv4 nor IPv6"
    ),
    "log-plugin-load": CodeInfo(
        "nccl-log", "warning", "A network plugin library could not be loaded"
    ),
    "log-nccl-message": CodeInfo(
        "nccl-log", "warning", "NCCL reported a failure the catalogue of its messages explains"
    ),
    # -- preflight
    "preflight-rank-duplicate": CodeInfo("preflight", "error", "Two nodes sent the same NODE_RANK"),
    "preflight-rank-unknown": CodeInfo("preflight", "error", "A node sent no valid NODE_RANK"),
    "preflight-rank-out-of-range": CodeInfo(
        "preflight", "error", "A node's NODE_RANK is outside [0, NUM_NODES)"
    ),
    "preflight-rank-missing": CodeInfo("preflight", "error", "Nodes did not report in time"),
    "preflight-contract-differs": CodeInfo(
        "preflight", "error", "The cluster contract differs between nodes"
    ),
    "preflight-env-differs": CodeInfo(
        "preflight", "error", "NCCL/Gloo/torch variables differ between nodes"
    ),
    "preflight-no-cluster-interface": CodeInfo(
        "preflight", "error", "A node has no cluster interface"
    ),
    "preflight-mtu-differs": CodeInfo(
        "preflight", "error", "The cluster interface MTU differs between nodes"
    ),
    "preflight-interface-differs": CodeInfo(
        "preflight", "warning", "The cluster interface name differs between nodes"
    ),
    "preflight-transport-differs": CodeInfo(
        "preflight", "error", "The RDMA transport differs between nodes"
    ),
    "preflight-rdma-ports-differ": CodeInfo(
        "preflight", "error", "The number of usable RDMA ports differs between nodes"
    ),
    "preflight-rdma-rate-differs": CodeInfo(
        "preflight", "warning", "RDMA port rates differ between nodes"
    ),
    "preflight-gid-differs": CodeInfo(
        "preflight", "error", "Nodes use different kinds of RoCE GID"
    ),
    "preflight-gpu-count": CodeInfo(
        "preflight", "error", "A node sees fewer or more GPUs than NUM_TRAINERS"
    ),
    "preflight-node-errors": CodeInfo("preflight", "error", "A node's local checks found errors"),
    "preflight-version-differs": CodeInfo(
        "preflight", "error", "Software versions differ between nodes"
    ),
    "preflight-token-mismatch": CodeInfo(
        "preflight", "error", "The preflight token differs between nodes"
    ),
    "preflight-addr-mismatch": CodeInfo(
        "preflight", "warning", "A node's NODE_ADDR is not the address it connected from"
    ),
    "preflight-ring-unreachable": CodeInfo(
        "preflight", "error", "A node cannot reach its ring neighbour"
    ),
    "preflight-rejected-peers": CodeInfo(
        "preflight", "warning", "Connections without a valid fingerprint were refused"
    ),
    "preflight-fingerprint-trimmed": CodeInfo(
        "preflight", "info", "A node's fingerprint was fitted to the message limit"
    ),
    "preflight-nccl-library-differs": CodeInfo(
        "preflight", "error", "Nodes load different NCCL libraries"
    ),
    "preflight-net-plugin-differs": CodeInfo(
        "preflight", "error", "Nodes load different NCCL network plugins"
    ),
    "preflight-hca-selection-differs": CodeInfo(
        "preflight", "warning", "NCCL selects a different number of RDMA ports on some nodes"
    ),
    "preflight-gpu-model-differs": CodeInfo(
        "preflight", "warning", "GPU models differ between nodes"
    ),
    "preflight-driver-differs": CodeInfo(
        "preflight", "warning", "NVIDIA driver versions differ between nodes"
    ),
    "preflight-host-limits-differ": CodeInfo(
        "preflight", "warning", "/dev/shm or memlock differ between nodes"  # noqa: S108
    ),
    "preflight-datacenter-differs": CodeInfo(
        "preflight", "error", "Nodes are in different data centres"
    ),
    # -- bench
    "bench-slow-node": CodeInfo("bench", "error", "One node's bandwidth is far below the rest"),
    "bench-slow-link": CodeInfo("bench", "warning", "One direction between two nodes is slow"),
    "bench-transport-mixed": CodeInfo(
        "bench", "warning", "Nodes moved data over different transports"
    ),
    "bench-below-line-rate": CodeInfo(
        "bench", "info", "All-reduce bandwidth is below the line rate"
    ),
    "bench-one-rank": CodeInfo("bench", "info", "One rank: no all-reduce bandwidth to measure"),
}

_UNREGISTERED = CodeInfo("doctor", "error", "Unregistered finding code")
_BY_NAME: dict[str, CodeInfo] = {str(code): info for code, info in CODES.items()}


def code_info(code: str) -> CodeInfo:
    """The registry entry of ``code``.

    An unregistered code is a bug in clusterenv, never the user's: it emits a
    :class:`RuntimeWarning` (the test suite turns warnings into failures) and reads as an
    error with a generic title, so that it can never stop a user's run.
    """
    info = _BY_NAME.get(code)
    if info is None:
        warnings.warn(f"unregistered finding code {code!r}", RuntimeWarning, stacklevel=3)
        return _UNREGISTERED
    return info


def codes_of(area: Area) -> tuple[str, ...]:
    """The codes one part emits, in registry order, e.g. ``codes_of("nccl-log")``."""
    return tuple(code for code, info in CODES.items() if info.area == area)


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing found wrong (or worth knowing), with the evidence and the fix.

    Attributes:
        code: Stable identifier, a key of :data:`CODES` documented in the troubleshooting page,
            e.g. ``"filter-selects-avoided"``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        title: One line a person can act on, naming the variable, value or device.
        evidence: What was observed, one fact per item, e.g. ``("NCCL_SOCKET_IFNAME='eth0'",)``.
        fix: What to do about it, e.g. ``"export NCCL_SOCKET_IFNAME=ens1"``.
    """

    code: str
    severity: Severity
    title: str
    evidence: tuple[str, ...] = ()
    fix: str = ""

    @classmethod
    def of(
        cls,
        code: Code,
        title: str = "",
        evidence: Iterable[str] = (),
        fix: str = "",
        *,
        severity: Severity | None = None,
    ) -> Finding:
        """A finding with a registered code; severity and title default to the registry's.

        Example::

            Finding.of("cluster-interface-down", "ens1 is down", ("operstate: down",),
                       "ip link set ens1 up")
        """
        info = code_info(code)
        return cls(code, severity or info.severity, title or info.title, tuple(evidence), fix)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: ``{"code", "severity", "title", "evidence", "fix"}``."""
        return {"code": self.code, "severity": self.severity, "title": self.title,
                "evidence": list(self.evidence), "fix": self.fix}

    def __str__(self) -> str:
        return f"{self.severity}[{self.code}]: {self.title}"


def has_errors(findings: Iterable[Finding]) -> bool:
    """Whether any finding is an error."""
    return any(f.severity == "error" for f in findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable within a severity."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: order[f.severity])
