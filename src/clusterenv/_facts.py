"""What the NCCL plan and ``doctor`` judge: one node's facts, detected once and only when needed.

:class:`Facts` bundles the environment, the cluster contract and the host's network, RDMA and
host facts. Each part is detected on first use, so a single-node plan with nothing set reads no
sysfs at all, and a caller that already detected a part passes it in.

Provider knowledge is applied here and nowhere else in the checks: on Runpod (the ``runpod``
source matched) ``eth0`` and 172.16.0.0/12 addresses are management; elsewhere only evidence
(loopback, link-local-only addresses) marks an interface as one to avoid.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from clusterenv._resolve import Resolution, from_hosts, system_resolve
from clusterenv._root import Root
from clusterenv._routes import route_interface
from clusterenv.host import ENVIRONMENT
from clusterenv.nccl.version import NcclVersion, detect_nccl_versions
from clusterenv.sources import runpod

if TYPE_CHECKING:
    from clusterenv._addresses import IPInterface
    from clusterenv.config import ClusterConfig, ConfigCheck
    from clusterenv.findings import Finding
    from clusterenv.host import HostFacts
    from clusterenv.network import Interface, NetworkInterfaces
    from clusterenv.rdma import RdmaInfo

__all__ = ["ENVIRONMENT", "Facts", "Proposal", "UserValue", "parse_hosts", "with_origin"]

#: Where a value the user set came from, e.g. ``("eth0", "environment")`` or
#: ``("eth0", "/etc/nccl.conf")``.
UserValue = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Proposal:
    """A value the plan would set, why, and how to tell whether a user's value does the same.

    Attributes:
        name: The variable, e.g. ``"NCCL_SOCKET_IFNAME"``.
        value: The value, e.g. ``"=ens1"``.
        reason: One sentence of evidence, e.g. ``"ens1 holds NODE_ADDR 10.65.0.2"``.
        same: Whether a value the user set has the same effect (then it is simply kept).
        unset_note: What happens while the variable is unset, said only when the plan sets an
            unset variable, e.g. ``"unset, NCCL would bootstrap over eth0 (172.20.0.5)"``.
    """

    name: str
    value: str
    reason: str
    same: Callable[[str], bool]
    unset_note: str = ""


def with_origin(findings: list[Finding], origin: str) -> list[Finding]:
    """``findings`` about a user value, each noting ``set in FILE`` when the value came from an
    NCCL config file rather than the environment."""
    if origin == ENVIRONMENT:
        return findings
    return [replace(f, evidence=(*f.evidence, f"set in {origin}")) for f in findings]


def parse_hosts(text: str) -> dict[str, list[str]]:
    """``/etc/hosts`` as name -> addresses in file order (names lower-cased).

    Example: ``"127.0.1.1 node-0.example node-0"`` gives
    ``{"node-0.example": ["127.0.1.1"], "node-0": ["127.0.1.1"]}``.
    """
    names: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            address = str(ipaddress.ip_address(fields[0].split("%", 1)[0]))
        except ValueError:
            continue
        for name in fields[1:]:
            entry = names.setdefault(name.lower().rstrip("."), [])
            if address not in entry:
                entry.append(address)
    return names


class Facts:
    """The facts of one node that the plan and the checks read; each part detected lazily.

    Args:
        environ: The environment to judge.
        root: ``/`` or a host snapshot.
        config: The cluster contract when the caller has it; otherwise it is read from
            ``environ`` and any problems are kept in :attr:`check`.
        network: Interfaces, when already detected.
        rdma: RDMA devices, when already detected.
        host: Host facts, when already detected.
        nccl_version: A version to assume instead of detecting it, e.g. ``"2.19.3"``.
        nccl_reported: Versions NCCL itself reported (see :mod:`clusterenv.nccl.probe`): the
            strongest evidence, listed before what is detected.
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str],
        root: Root,
        config: ClusterConfig | None = None,
        network: NetworkInterfaces | None = None,
        rdma: RdmaInfo | None = None,
        host: HostFacts | None = None,
        nccl_version: str | None = None,
        nccl_reported: tuple[NcclVersion, ...] = (),
    ) -> None:
        self.environ = environ
        self.root = root
        self._given_config = config
        self._given_network = network
        self._given_rdma = rdma
        self._given_host = host
        self._given_version = nccl_version
        self._reported_versions = nccl_reported

    def derive(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        nccl_reported: tuple[NcclVersion, ...] | None = None,
    ) -> Facts:
        """New facts with the environment or NCCL's reported version replaced; this object is
        never changed. What does not depend on the replaced part carries over instead of being
        detected again: the interfaces, RDMA devices and host facts always, the contract read
        from the environment when only the version changes, and the contract itself when the
        environment changes only by what a plan sets (``NCCL_*``, ``GLOO_*``).

        Example: ``facts.derive(environ={**facts.environ, **plan.env})``.
        """
        detected = {part: self.__dict__.get(part) for part in ("network", "rdma", "host")}
        derived = Facts(
            environ=self.environ if environ is None else environ,
            root=self.root,
            config=self._given_config if environ is None else self.config,
            network=detected["network"] or self._given_network,
            rdma=detected["rdma"] or self._given_rdma,
            host=detected["host"] or self._given_host,
            nccl_version=self._given_version,
            nccl_reported=self._reported_versions if nccl_reported is None else nccl_reported,
        )
        if environ is None and "check" in self.__dict__:
            derived.__dict__["check"] = self.__dict__["check"]  # the same environment, read once
        return derived

    # -- the cluster contract ---------------------------------------------------------------

    @cached_property
    def check(self) -> ConfigCheck | None:
        """The outcome of reading the environment; None when the caller gave a config."""
        if self._given_config is not None:
            return None
        from clusterenv.config import check_config  # noqa: PLC0415  # pydantic on first use

        return check_config(self.environ, root=self.root)

    @property
    def config(self) -> ClusterConfig | None:
        """The validated contract, or None when the environment has problems."""
        if self._given_config is not None:
            return self._given_config
        return self.check.config if self.check is not None else None

    @property
    def source(self) -> str:
        """The environment source that matched, e.g. ``"runpod"``."""
        if self.config is not None:
            return self.config.source
        return self.check.source if self.check is not None else "unknown"

    @property
    def multi_node(self) -> bool:
        """Whether the (valid) contract spans more than one node."""
        return self.config is not None and self.config.is_multi_node

    @property
    def runpod(self) -> bool:
        """Whether Runpod's contract matched, so its network knowledge applies."""
        return self.source == "runpod"

    # -- detected parts ---------------------------------------------------------------------

    @cached_property
    def network(self) -> NetworkInterfaces:
        """The node's interfaces."""
        if self._given_network is not None:
            return self._given_network
        from clusterenv.network import NetworkInterfaces  # noqa: PLC0415  # netifaces on use

        return NetworkInterfaces.detect(root=self.root)

    @cached_property
    def rdma(self) -> RdmaInfo:
        """The node's RDMA devices."""
        if self._given_rdma is not None:
            return self._given_rdma
        from clusterenv.rdma import RdmaInfo  # noqa: PLC0415

        return RdmaInfo.detect(root=self.root)

    @cached_property
    def host(self) -> HostFacts:
        """GPUs, ``/dev/shm``, memlock, GPUDirect and NCCL config files."""
        if self._given_host is not None:
            return self._given_host
        from clusterenv.host import HostFacts  # noqa: PLC0415

        return HostFacts.detect(environ=self.environ, root=self.root)

    @cached_property
    def nccl_versions(self) -> tuple[NcclVersion, ...]:
        """Evidence of the NCCL version, most likely first; empty when unknown."""
        if self._given_version is not None:
            return detect_nccl_versions(self.environ, self.root, override=self._given_version)
        detected = detect_nccl_versions(self.environ, self.root)
        return (*self._reported_versions, *detected)

    # -- the cluster interface --------------------------------------------------------------

    @cached_property
    def cluster_choice(self) -> tuple[Interface | None, str]:
        """The interface that carries cluster traffic and why (see ``choose_cluster_interface``)."""
        if self.config is None:
            return None, "the cluster environment is invalid"
        if self.config.source == "sagemaker":  # the platform names it: evidence, not a guess
            named = (self.environ.get("SM_NETWORK_INTERFACE_NAME") or "").strip()
            interface = self.network.get(named) if named else None
            if interface is not None and not interface.is_loopback:
                return interface, (f"{named} is SM_NETWORK_INTERFACE_NAME, the interface "
                                   "SageMaker names for distributed traffic")
        interface, why = self.network.choose_cluster_interface(self.config)
        if interface is None and self.config.is_multi_node:
            # A host name for the rendezvous (MASTER_ADDR=node-0, common under Slurm): resolve
            # it as the job will, and match the subnet of its address.
            resolved = self._resolved_host(self.config.primary_addr)
            if resolved is not None:
                name, address = resolved
                config = self.config.model_copy(update={"primary_addr": address})
                chosen, chosen_why = self.network.choose_cluster_interface(config)
                if chosen is not None:
                    return chosen, f"{chosen_why} ({name} resolves to {address})"
        return interface, why

    def _resolved_host(self, host: str) -> tuple[str, str] | None:
        """``(name, first address)`` when ``host`` is a name that resolves, else None."""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            resolution = self.resolve(host)
            if resolution.addresses:
                return host, resolution.addresses[0]
        return None

    @property
    def cluster_interface(self) -> Interface | None:
        """The cluster interface, or None."""
        return self.cluster_choice[0]

    @cached_property
    def default_route(self) -> str | None:
        """The interface of the IPv4 default route, e.g. ``"eth0"``; None without a routing
        table or a default route."""
        if not self.root.exists("proc/net/route"):
            return None
        return route_interface("0.0.0.0", root=self.root)  # noqa: S104  # the default route

    def management_reason(self, interface: Interface) -> str | None:
        """Why ``interface`` is Runpod management (``eth0``, a 172.x address), else None."""
        if not self.runpod:
            return None
        if runpod.is_management(interface=interface.name):
            return "Runpod's management interface"
        for address in interface.ipv4:
            if runpod.is_management(address=str(address.ip)):
                return f"management address {address.ip} (Runpod)"
        return None

    @cached_property
    def avoid(self) -> dict[str, str]:
        """Interfaces that must not carry cluster traffic, with the reason, e.g.
        ``{"eth0": "Runpod's management interface", "lo": "loopback"}``; empty on one node."""
        if not self.multi_node:
            return {}
        avoid: dict[str, str] = {}
        for interface in self.network:
            reason = self.management_reason(interface)
            if interface.is_loopback:
                reason = "loopback"
            elif reason is None and interface.addresses and not interface.has_routable_address:
                reason = "only link-local addresses"
            if reason is not None:
                avoid[interface.name] = reason
        return avoid

    @cached_property
    def getifaddrs_order(self) -> tuple[tuple[str, IPInterface, bool], ...]:
        """Every address as ``getifaddrs`` lists it: ``(interface, address, running)``, the IPv4
        addresses of every interface by interface index, then the IPv6 ones. ``running``: the
        interface is up and has carrier. An address with a label (``eth0:vip``) is listed under
        the label, right after the addresses of its interface, and shares its state."""

        def index(name: str) -> int:
            text = self.root.read(f"sys/class/net/{name}/ifindex") or ""
            return int(text) if text.isdigit() and len(text) < 10 else 1 << 31

        interfaces = {i.name: i for i in self.network}

        def owner(i: Interface) -> Interface:
            return interfaces.get(i.name.split(":", 1)[0]) or i

        ordered = sorted(self.network, key=lambda i: (index(owner(i).name), owner(i) is not i))
        v4 = [(i.name, a, owner(i).is_up) for i in ordered for a in i.ipv4]
        v6 = [(i.name, a, owner(i).is_up) for i in ordered for a in i.ipv6]
        return (*v4, *v6)

    @cached_property
    def address_order(self) -> tuple[tuple[str, IPInterface], ...]:
        """Every address NCCL's interface search considers, as ``(interface, address)`` in
        ``getifaddrs`` order (:attr:`getifaddrs_order`): only interfaces that are up and
        running, never ``::1``."""
        loopback = ipaddress.IPv6Address("::1")
        return tuple((n, a) for n, a, running in self.getifaddrs_order
                     if running and a.ip != loopback)

    @cached_property
    def kernel_order(self) -> tuple[str, ...]:
        """Interfaces NCCL can use (up, with an address other than ``::1``), in ``getifaddrs``
        order: those with IPv4 by interface index, then IPv6-only ones."""
        return tuple(dict.fromkeys(name for name, _ in self.address_order))

    @cached_property
    def owners(self) -> dict[str, str]:
        """Address -> interface name, e.g. ``{"10.65.0.2": "ens1"}``."""
        return {str(a.ip): i.name for i in self.network for a in i.addresses}

    def describe(self, name: str) -> str:
        """``"eth0 (172.20.0.5)"``: an interface with its first address."""
        interface = self.network.get(name)
        if interface is None or not interface.addresses:
            return name
        return f"{name} ({interface.addresses[0].ip})"

    # -- values the user set ----------------------------------------------------------------

    @cached_property
    def nccl_conf(self) -> dict[str, UserValue]:
        """``NCCL_*`` values from NCCL's config files, with the file each came from."""
        # An empty environment makes every file value count, with its file as provenance.
        return self.host.nccl_conf_values(environ={})

    def user_value(self, name: str) -> UserValue | None:
        """The value NCCL/Gloo would see for ``name`` and where it comes from, or None.

        The environment wins; ``NCCL_*`` variables may also come from ``NCCL_CONF_FILE`` /
        ``~/.nccl.conf`` / ``/etc/nccl.conf``, which NCCL applies without overriding the
        environment. A variable present with an empty value counts as set.
        """
        value = self.environ.get(name)
        if value is not None:
            return value, ENVIRONMENT
        if name.startswith("NCCL_"):
            return self.nccl_conf.get(name)
        return None

    # -- names ------------------------------------------------------------------------------

    @cached_property
    def hostname(self) -> str | None:
        """This node's host name: recorded in a snapshot, else the live one, else
        ``/etc/hostname``."""
        recorded = self.root.host.get("hostname")
        if isinstance(recorded, str) and recorded:
            return recorded
        if self.root.is_live:
            return socket.gethostname() or None
        text = self.root.read("etc/hostname")
        return text.split()[0] if text else None

    @cached_property
    def etc_hosts(self) -> dict[str, list[str]]:
        """``/etc/hosts`` under the root, parsed."""
        return parse_hosts("\n".join(self.root.read_lines("etc/hosts")))

    def resolve(self, name: str) -> Resolution:
        """What ``name`` resolves to for the job: the system resolver on the live host (with a
        deadline), the snapshot's ``/etc/hosts`` under a snapshot root. Cached per name."""
        key = name.strip().lower().rstrip(".")
        cached = self._resolved.get(key)
        if cached is None:
            cached = (system_resolve(name.strip()) if self.root.is_live
                      else from_hosts(name.strip(), self.etc_hosts,
                                      where="the snapshot's /etc/hosts"))
            self._resolved[key] = cached
        return cached

    @cached_property
    def _resolved(self) -> dict[str, Resolution]:
        return {}

    @property
    def in_torchrun_worker(self) -> bool:
        """Whether this process was started by torchrun (its agent owns the store port)."""
        return bool(self.environ.get("TORCHELASTIC_RUN_ID")) or self.source == "torchelastic"
