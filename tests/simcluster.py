"""A simulated Runpod-style cluster on one machine: network namespaces as nodes (DESIGN §8).

Each node is a network namespace with the interfaces a Runpod Instant Cluster node has::

    node i (netns ce-<pid>-<tag>-n<i>)        switch (netns ce-<pid>-<tag>-sw)
      lo      127.0.0.1/8
      eth0    172.20.0.(10+i)/16  ── veth ──  mgmt     bridge, 172.20.0.1/16 (the gateway),
              default via 172.20.0.1                   every node port `isolated on`
      ens1    10.65.0.(2+i)/24    ── veth ──  cluster  bridge, no address

The bridges live in a switch namespace of their own rather than in the root namespace, so the
harness never adds an address or a route to the machine it runs on (Docker networks often own
172.x ranges there) and bridged frames never meet the host's firewall (``br_netfilter`` sends
them through iptables' FORWARD chain, which Docker sets to DROP). Deleting the switch namespace
removes both bridges and every veth pair at once. Nothing leaves the machine: the gateway has no
uplink and does not forward.

Isolated bridge ports talk only to the bridge itself, so a node reaches the gateway but not the
172.x address of another node, exactly the trap of Runpod's ``eth0``. ``ip netns exec`` mounts
``/etc/netns/<ns>/{hosts,resolv.conf,nsswitch.conf}`` over ``/etc``: each node gets a hosts file
(by default the Debian mapping of its hostname to ``127.0.1.1``, which sends Gloo to loopback), an
empty ``resolv.conf`` and an ``nsswitch.conf`` with ``hosts: files``, so an unknown name fails at
once with ``Name or service not known`` (what an NXDOMAIN gives) instead of waiting on DNS. Commands
run under ``unshare --uts --pid --fork --kill-child --mount-proc``: their own hostname, and a PID
namespace whose every process dies with the command, so a timeout never leaves an orphan.

Use the ``sim_cluster`` fixture (tests/conftest.py), or :func:`make_cluster` as a context
manager::

    with make_cluster(2, trainers=2) as cluster:
        results = cluster.run_all(lambda node: [sys.executable, "-m", "clusterenv", "doctor"],
                                  timeout=30)
        assert all(r.returncode == 0 for r in results), "\\n".join(r.describe() for r in results)
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol, TypeVar

from typing_extensions import Self

__all__ = [
    "CLUSTER_IFNAME",
    "CLUSTER_PREFIX",
    "MANAGEMENT_GATEWAY",
    "MANAGEMENT_IFNAME",
    "ClusterFactory",
    "HostsStyle",
    "Killed",
    "NodeResult",
    "SimCluster",
    "SimCommandError",
    "SimNode",
    "SimProcess",
    "base_env",
    "make_cluster",
    "netns_available",
    "render_hosts",
    "sweep_leftovers",
    "torch_available",
]

CLUSTER_IFNAME = "ens1"
MANAGEMENT_IFNAME = "eth0"
#: ``10.65.0.(CLUSTER_HOST_OFFSET + rank)/24``: node 0 (the primary) is ``10.65.0.2``.
CLUSTER_PREFIX = "10.65.0."
CLUSTER_HOST_OFFSET = 2
MANAGEMENT_PREFIX = "172.20.0."
MANAGEMENT_HOST_OFFSET = 10
MANAGEMENT_GATEWAY = "172.20.0.1"
MAX_NODES = 64

#: How a node's own hostname appears in its ``/etc/hosts``:
#: ``"debian"`` maps it to ``127.0.1.1`` (Debian/Ubuntu images; Gloo then binds loopback),
#: ``"management"`` to the node's ``eth0`` address (what Docker writes: Gloo binds 172.x),
#: ``"cluster"`` maps every node's hostname to its ``ens1`` address (a well-configured cluster),
#: ``"management-all"`` maps every node's hostname to that node's ``eth0`` address (the Runpod
#: layout: Gloo binds 172.x, and ``PRIMARY_ADDR=node-0`` leads to the primary's ``eth0``),
#: ``"none"`` leaves it out (``gai error: -2 - Name or service not known``).
HostsStyle = Literal["debian", "management", "cluster", "management-all", "none"]
#: Why the harness killed a command: its deadline passed, or another node of a run failed.
Killed = Literal["deadline", "peer-failed"]
_HOSTS_STYLES: tuple[str, ...] = ("debian", "management", "cluster", "management-all", "none")

# ce-<creator pid>-<6 hex>-<role>: the sweeper removes names whose creator is gone.
_NETNS_NAME = re.compile(r"^ce-(?P<pid>[0-9]+)-[0-9a-f]{6}-(?:n[0-9]+|sw|probe)$")
_ETC_NETNS = Path("/etc/netns")
_NSSWITCH = (
    "passwd: files\ngroup: files\nshadow: files\ngshadow: files\n"
    "hosts: files\nnetworks: files\nprotocols: files\nservices: files\n"
    "ethers: files\nrpc: files\n"
)
# pid 1 of the node's PID namespace: set the hostname, run the command as a child (so it keeps
# normal signal semantics, which pid 1 would not) and pass its exit status on.
_NODE_SHIM = 'hostname "$1" || exit 125; shift; "$@"; exit $?'
_TOOLS = ("ip", "bridge", "unshare", "sh")


# -- availability ----------------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if path is None:
        raise FileNotFoundError(name)
    return path


def _cmd(argv: Sequence[str], *, timeout: float = 30.0) -> str:
    """Run a setup command; raise ``RuntimeError`` naming the command and its error output."""
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise RuntimeError(f"`{' '.join(argv)}` failed with exit {proc.returncode}: {detail}")
    return proc.stdout


def _new_tag() -> str:
    return secrets.token_hex(3)


@functools.cache
def netns_available() -> tuple[bool, str]:
    """Whether this machine can run the simulated cluster, and if not, why.

    Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), ``ip`` and ``bridge`` (iproute2), ``unshare``
    (util-linux), and a kernel that creates a namespace with a bridge, a veth pair and an
    isolated bridge port. Probes once per process with a throwaway namespace.

    Returns:
        ``(True, "")``, or ``(False, reason)`` such as
        ``(False, "not root (euid 1000): network namespaces need CAP_NET_ADMIN; run as root")``.
    """
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces are Linux-only (this is {sys.platform})"
    if os.geteuid() != 0:
        return False, (
            f"not root (euid {os.geteuid()}): network namespaces need CAP_NET_ADMIN; run as root"
        )
    for name in _TOOLS:
        try:
            _tool(name)
        except FileNotFoundError:
            package = "util-linux" if name == "unshare" else "iproute2"
            return False, f"`{name}` not found on PATH: install {package}"
    probe = f"ce-{os.getpid()}-{_new_tag()}-probe"
    ip, bridge, unshare, sh = (_tool(name) for name in _TOOLS)
    try:
        _cmd([ip, "netns", "add", probe])
        _cmd([ip, "-n", probe, "link", "add", "probebr", "type", "bridge"])
        _cmd([ip, "-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        _cmd([ip, "-n", probe, "link", "set", "v0", "master", "probebr"])
        _cmd([bridge, "-n", probe, "link", "set", "dev", "v0", "isolated", "on"])
        _cmd([ip, "netns", "exec", probe, unshare, "--uts", "--pid", "--fork", "--kill-child",
              "--mount-proc", sh, "-c", "hostname probe"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return False, f"cannot build a simulated node here: {e}"
    finally:
        subprocess.run([ip, "netns", "del", probe], capture_output=True, check=False)
    return True, ""


def torch_available() -> tuple[bool, str]:
    """Whether PyTorch is importable by ``sys.executable``, without importing it here.

    Returns:
        ``(True, "")`` or ``(False, "torch is not installed ...")``.
    """
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False, (
            f"torch is not installed for {sys.executable}: pip install torch==2.13.0 "
            "(CPU is enough) to run the torchrun/Gloo tests"
        )
    return True, ""


# -- files and environment -------------------------------------------------------------------


def render_hosts(
    style: HostsStyle,
    hostname: str,
    *,
    cluster_addr: str,
    management_addr: str,
    peers: Mapping[str, str] | None = None,
    management_peers: Mapping[str, str] | None = None,
) -> str:
    """The ``/etc/hosts`` of one node.

    Args:
        style: how the node's own hostname appears, see :data:`HostsStyle`.
        hostname: the node's hostname, e.g. ``"node-1"``.
        cluster_addr: its ``ens1`` address, e.g. ``"10.65.0.3"``.
        management_addr: its ``eth0`` address, e.g. ``"172.20.0.11"``.
        peers: hostname -> cluster address of every node, used by the ``"cluster"`` style.
        management_peers: hostname -> ``eth0`` address of every node, used by the
            ``"management-all"`` style.

    Returns:
        The file text, e.g. ``"127.0.0.1\\tlocalhost\\n127.0.1.1\\tnode-1\\n..."``.
    """
    lines = ["127.0.0.1\tlocalhost"]
    if style == "debian":
        lines.append(f"127.0.1.1\t{hostname}")
    elif style == "management":
        lines.append(f"{management_addr}\t{hostname}")
    elif style == "cluster":
        everyone = dict(peers or {})
        everyone[hostname] = cluster_addr
        lines += [f"{addr}\t{name}" for name, addr in everyone.items()]
    elif style == "management-all":
        everyone = dict(management_peers or {})
        everyone[hostname] = management_addr
        lines += [f"{addr}\t{name}" for name, addr in everyone.items()]
    elif style != "none":
        raise ValueError(f"hosts style {style!r}: expected one of {', '.join(_HOSTS_STYLES)}")
    lines += ["::1\tlocalhost ip6-localhost ip6-loopback", "ff02::1\tip6-allnodes",
              "ff02::2\tip6-allrouters"]
    return "\n".join(lines) + "\n"


def base_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The minimal environment every node command starts from.

    Deliberately not ``os.environ``: a developer's ``NCCL_*``/``GLOO_*``/``MASTER_*`` must not
    leak into a simulated node. Carries ``PATH`` (this interpreter's directory first), ``HOME``,
    ``LANG``, ``PYTHONUNBUFFERED``, ``VIRTUAL_ENV`` and ``PYTHONPATH`` when the code under test is
    a source checkout, and ``CI`` / ``TMPDIR`` / ``COVERAGE_PROCESS_START`` when set.

    Args:
        environ: where ``HOME``, ``CI`` and friends are read; ``None`` is ``os.environ``.

    Returns:
        e.g. ``{"PATH": "/repo/.venv/bin:/usr/local/sbin:...", "HOME": "/root", ...}``.
    """
    environ = os.environ if environ is None else environ
    system_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{system_path}",
        "HOME": environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    import clusterenv

    package_parent = Path(clusterenv.__file__).resolve().parents[1]
    if package_parent.name == "src":  # a checkout: make sure nodes run this very code
        env["PYTHONPATH"] = str(package_parent)
    for name in ("CI", "TMPDIR", "COVERAGE_PROCESS_START"):
        if name in environ:
            env[name] = environ[name]
    return env


# -- results and processes -------------------------------------------------------------------


def _tail(text: str, lines: int) -> str:
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else "(empty)"


class NodeResult(subprocess.CompletedProcess[str]):
    """What a command did on one node: a ``CompletedProcess`` plus the node and the timing.

    ``killed`` says why the harness killed it, if it did: ``"deadline"`` (its timeout passed;
    ``timed_out`` is then True) or ``"peer-failed"`` (``run_all(stop_on_failure=True)`` and
    another node failed first); ``returncode`` is then ``-9``. :meth:`describe` is the text to
    put in an assertion message.
    """

    def __init__(
        self,
        node: SimNode,
        args: Sequence[str],
        returncode: int,
        stdout: str,
        stderr: str,
        *,
        killed: Killed | None,
        duration_s: float,
    ) -> None:
        super().__init__(list(args), returncode, stdout, stderr)
        self.node = node
        self.killed = killed
        self.duration_s = duration_s

    @property
    def timed_out(self) -> bool:
        """True when the command was still running at its deadline and was killed."""
        return self.killed == "deadline"

    def describe(self, lines: int = 40) -> str:
        """A readable summary with the last ``lines`` of stdout and stderr."""
        if self.killed == "deadline":
            outcome = f"killed at its deadline after {self.duration_s:.1f} s"
        elif self.killed == "peer-failed":
            outcome = f"killed after {self.duration_s:.1f} s because another node failed"
        else:
            outcome = f"exit {self.returncode} after {self.duration_s:.1f} s"
        return (
            f"{self.node.hostname} (rank {self.node.rank}, netns {self.node.netns}): {outcome}\n"
            f"$ {' '.join(self.args)}\n"
            f"--- stdout ---\n{_tail(self.stdout, lines)}\n"
            f"--- stderr ---\n{_tail(self.stderr, lines)}"
        )

    def check_returncode(self) -> None:
        """Raise :class:`SimCommandError` (with :meth:`describe`) unless it exited 0."""
        if self.returncode != 0 or self.killed is not None:
            raise SimCommandError(self)


class SimCommandError(subprocess.CalledProcessError):
    """A node command failed or timed out; ``str()`` shows the node, the command and its output."""

    def __init__(self, result: NodeResult) -> None:
        super().__init__(result.returncode, result.args, result.stdout, result.stderr)
        self.result = result

    def __str__(self) -> str:
        return self.result.describe()


class SimProcess:
    """A command started on a node by :meth:`SimNode.popen`; output goes to temporary files.

    Signals go to the whole process group (``ip netns exec`` → ``unshare`` → the command and its
    children); killing it kills the node-side PID namespace, so nothing survives it.
    """

    def __init__(self, node: SimNode, argv: Sequence[str], env: Mapping[str, str],
                 cwd: str | os.PathLike[str] | None) -> None:
        ip, _, unshare, sh = (_tool(name) for name in _TOOLS)
        self.node = node
        self.argv = list(argv)
        self._stdout: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in wait()
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._started = time.monotonic()
        self._result: NodeResult | None = None
        self._ended: float | None = None
        self._killed: Killed | None = None
        self._popen = subprocess.Popen(
            [ip, "netns", "exec", node.netns, unshare, "--uts", "--pid", "--fork",
             "--kill-child", "--mount-proc", sh, "-c", _NODE_SHIM, "sh", node.hostname,
             *self.argv],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._stdout,
            stderr=self._stderr,
            start_new_session=True,  # its own process group, so one killpg reaches every child
        )

    @property
    def pid(self) -> int:
        """The host PID of the process group leader (``unshare``)."""
        return self._popen.pid

    def poll(self) -> int | None:
        """The exit status when it has finished, else ``None``."""
        if self._result is not None:
            return self._result.returncode
        code = self._popen.poll()
        if code is not None and self._ended is None:
            self._ended = time.monotonic()
        return code

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to every process of the command (the node's PID 1 ignores all but KILL)."""
        # Only while the leader is unreaped: then its PID, and so the group ID, cannot be reused.
        if self._popen.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, sig)

    def kill(self, reason: Killed = "deadline") -> None:
        """SIGKILL the command and everything it started, reap it, and remember why.

        Returns once every process of the command is gone, ``setsid`` escapees included.
        """
        if self.poll() is None:
            init = _children(self._popen.pid)  # the node-side PID 1, forked by unshare
            self.send_signal(signal.SIGKILL)
            self._popen.wait()
            self._ended = time.monotonic()
            self._killed = reason
            # PID 1 dies by PDEATHSIG after unshare; it empties its namespace before it exits.
            deadline = time.monotonic() + 10
            while any(_running(pid) for pid in init) and time.monotonic() < deadline:
                time.sleep(0.005)

    def wait(self, timeout: float, *, check: bool = False) -> NodeResult:
        """Wait at most ``timeout`` seconds; kill everything at the deadline; return the result.

        Args:
            timeout: seconds to wait, e.g. ``30``.
            check: raise :class:`SimCommandError` when it did not exit 0.
        """
        if self._result is None:
            try:
                self._popen.wait(timeout=max(timeout, 0.0))
            except subprocess.TimeoutExpired:
                self.kill("deadline")
            self.poll()
            ended = self._ended if self._ended is not None else time.monotonic()
            self._result = NodeResult(
                self.node, self.argv, self._popen.returncode, self._read(self._stdout),
                self._read(self._stderr), killed=self._killed,
                duration_s=ended - self._started,
            )
            self.node.cluster._forget(self)
        if check:
            self._result.check_returncode()
        return self._result

    @staticmethod
    def _read(file: IO[bytes]) -> str:
        file.seek(0)
        text = file.read().decode("utf-8", errors="replace")
        file.close()
        return text


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (field 3 of ``/proc/PID/stat``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


# -- nodes and clusters ----------------------------------------------------------------------

EnvOverrides = Mapping[str, "str | None"]
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class SimNode:
    """One simulated node: a network namespace with ``lo``, ``eth0`` and ``ens1``.

    Attributes:
        rank: ``NODE_RANK``, e.g. ``1``.
        netns: the namespace name, e.g. ``"ce-4242-a1b2c3-n1"``.
        hostname: e.g. ``"node-1"``.
        cluster_addr: ``NODE_ADDR`` on ``ens1``, e.g. ``"10.65.0.3"``.
        management_addr: the ``eth0`` address, e.g. ``"172.20.0.11"``.
        mtu: the ``ens1`` MTU, e.g. ``9000`` (``None``: the kernel default, 1500).
        hosts: the :data:`HostsStyle` of its ``/etc/hosts``.
    """

    cluster: SimCluster = field(repr=False)
    rank: int
    netns: str
    hostname: str
    cluster_addr: str
    management_addr: str
    mtu: int | None
    hosts: HostsStyle

    def runpod_env(self) -> dict[str, str]:
        """The variables Runpod sets on this node, e.g. ``{"NODE_RANK": "1", ...}``."""
        c = self.cluster
        primary = c.primary_addr
        port = str(c.primary_port)
        return {
            "PRIMARY_ADDR": primary,
            "MASTER_ADDR": primary,
            "PRIMARY_PORT": port,
            "MASTER_PORT": port,
            "HOST_NODE_ADDR": f"{primary}:{port}",
            "NODE_ADDR": self.cluster_addr,
            "NODE_RANK": str(self.rank),
            "NUM_NODES": str(len(c.nodes)),
            "NUM_TRAINERS": str(c.trainers),
            "WORLD_SIZE": str(len(c.nodes) * c.trainers),
        }

    def env(self, extra: EnvOverrides | None = None, /, **overrides: str | None) -> dict[str, str]:
        """This node's environment: :func:`base_env`, the Runpod variables, then changes.

        A change to ``None`` removes the variable::

            node.env(GLOO_SOCKET_IFNAME="ens1", MASTER_ADDR=None)
        """
        env = {**self.cluster.base_env, **self.runpod_env()}
        for name, value in {**(extra or {}), **overrides}.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def popen(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> SimProcess:
        """Start ``argv`` on this node and return at once (for concurrent runs across nodes).

        Args:
            argv: the command, e.g. ``[sys.executable, "-m", "clusterenv", "show"]``.
            env: the complete environment; ``None`` is :meth:`env`.
            cwd: working directory (the filesystem is the host's).
        """
        self.cluster._require_started()
        proc = SimProcess(self, [os.fspath(a) for a in argv],
                          self.env() if env is None else env, cwd)
        self.cluster._track(proc)
        return proc

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        cwd: str | os.PathLike[str] | None = None,
        check: bool = False,
    ) -> NodeResult:
        """Run ``argv`` on this node; kill it and all it started after ``timeout`` seconds."""
        return self.popen(argv, env=env, cwd=cwd).wait(timeout, check=check)

    def torchrun_argv(
        self, script: str | os.PathLike[str], *args: str, nproc_per_node: int | None = None
    ) -> list[str]:
        """``python -m torch.distributed.run`` with static rendezvous at the primary.

        Returns:
            e.g. ``[python, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
            "--node-rank=1", "--rdzv-backend=static", "--master-addr=10.65.0.2",
            "--master-port=29500", "script.py"]``.
        """
        c = self.cluster
        return [
            sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={len(c.nodes)}",
            f"--nproc-per-node={nproc_per_node or c.trainers}",
            f"--node-rank={self.rank}",
            "--rdzv-backend=static",
            f"--master-addr={c.primary_addr}",
            f"--master-port={c.primary_port}",
            os.fspath(script), *args,
        ]


PerNode = Callable[[SimNode], "Sequence[str | os.PathLike[str]]"]
_OPEN_CLUSTERS: set[SimCluster] = set()


class SimCluster:
    """N simulated nodes; build with :func:`make_cluster` or the ``sim_cluster`` fixture.

    Attributes:
        nodes: the nodes in rank order; ``nodes[0]`` is the primary.
        trainers: ``NUM_TRAINERS``, e.g. ``2``.
        primary_port: ``PRIMARY_PORT``; always free, every cluster has its own namespaces.
        tag: unique per cluster, e.g. ``"4242-a1b2c3"`` (all its names contain it).
    """

    primary_addr = f"{CLUSTER_PREFIX}{CLUSTER_HOST_OFFSET}"

    def __init__(
        self,
        nodes: int = 2,
        *,
        trainers: int = 2,
        mtu: int | Sequence[int | None] | None = None,
        hosts: HostsStyle | Sequence[HostsStyle] = "debian",
        hostnames: Sequence[str] | None = None,
        primary_port: int = 29500,
        cluster_first: bool = False,
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes={nodes}: expected 1..{MAX_NODES}")
        if trainers < 1:
            raise ValueError(f"trainers={trainers}: expected at least 1")
        if not 1 <= primary_port <= 65535:
            raise ValueError(f"primary_port={primary_port}: expected 1..65535")
        mtus: list[int | None] = _per_node("mtu", mtu, nodes)
        styles: list[HostsStyle] = _per_node("hosts", hosts, nodes)
        for style in styles:
            if style not in _HOSTS_STYLES:
                raise ValueError(f"hosts={style!r}: expected one of {', '.join(_HOSTS_STYLES)}")
        names = list(hostnames) if hostnames is not None else [f"node-{i}" for i in range(nodes)]
        if len(names) != nodes:
            raise ValueError(f"hostnames: expected {nodes} names, got {len(names)}")
        self.trainers = trainers
        self.primary_port = primary_port
        self.cluster_first = cluster_first
        self.tag = f"{os.getpid()}-{_new_tag()}"
        self.switch = f"ce-{self.tag}-sw"
        self.base_env = base_env()
        self.nodes: tuple[SimNode, ...] = tuple(
            SimNode(
                cluster=self,
                rank=i,
                netns=f"ce-{self.tag}-n{i}",
                hostname=names[i],
                cluster_addr=f"{CLUSTER_PREFIX}{CLUSTER_HOST_OFFSET + i}",
                management_addr=f"{MANAGEMENT_PREFIX}{MANAGEMENT_HOST_OFFSET + i}",
                mtu=mtus[i],
                hosts=styles[i],
            )
            for i in range(nodes)
        )
        self._processes: list[SimProcess] = []
        self._started = False
        self._closed = False

    @property
    def primary(self) -> SimNode:
        """Node 0, which holds ``PRIMARY_ADDR``."""
        return self.nodes[0]

    # -- lifecycle

    def start(self) -> Self:
        """Create the namespaces, bridges, links, addresses and files; undo all on failure."""
        if self._started:
            return self
        self._started = True
        _OPEN_CLUSTERS.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every command still running, delete namespaces and ``/etc/netns`` files.

        Idempotent. Tries everything, then raises ``RuntimeError`` listing what it could not
        remove.
        """
        if self._closed:
            return
        self._closed = True
        _OPEN_CLUSTERS.discard(self)
        problems: list[str] = []
        for proc in list(self._processes):
            try:
                proc.kill("deadline")
                proc.wait(0)
            except OSError as e:
                problems.append(f"killing {proc.argv}: {e}")
        problems += _remove_netns(self.switch, *(node.netns for node in self.nodes))
        if problems:
            raise RuntimeError("simulated cluster teardown incomplete:\n" + "\n".join(problems))

    # -- running commands

    def popen_all(
        self,
        argv: PerNode | Sequence[Sequence[str | os.PathLike[str]]],
        *,
        env: Callable[[SimNode], Mapping[str, str]] | Sequence[Mapping[str, str]] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> list[SimProcess]:
        """Start one command per node at once; ``argv``/``env`` are per-node lists or callables."""
        argvs = _for_each("argv", argv, self.nodes)
        envs = [None] * len(self.nodes) if env is None else _for_each("env", env, self.nodes)
        for one in argvs:
            if isinstance(one, str | bytes):
                raise TypeError("argv: pass one argument list per node, or a callable node -> argv")
        started: list[SimProcess] = []
        try:
            for node, node_argv, node_env in zip(self.nodes, argvs, envs, strict=True):
                started.append(node.popen(node_argv, env=node_env, cwd=cwd))
        except BaseException:
            for proc in started:
                proc.kill()
            raise
        return started

    def run_all(
        self,
        argv: PerNode | Sequence[Sequence[str | os.PathLike[str]]],
        *,
        env: Callable[[SimNode], Mapping[str, str]] | Sequence[Mapping[str, str]] | None = None,
        timeout: float = 60.0,
        cwd: str | os.PathLike[str] | None = None,
        check: bool = False,
        stop_on_failure: bool = False,
    ) -> list[NodeResult]:
        """Run one command per node concurrently under one hard deadline; results in rank order.

        Whatever is still running at the deadline is killed with everything it started, and
        its result has ``timed_out=True``.

        Args:
            argv: one argument list per node, or a callable node -> argv.
            env: one complete environment per node, or a callable; ``None``: ``node.env()``.
            timeout: seconds for all of them together, e.g. ``60``.
            cwd: working directory on every node.
            check: raise :class:`SimCommandError` for the first node that failed (after all
                have finished).
            stop_on_failure: once one node exits non-zero, kill the others (``killed ==
                "peer-failed"``) instead of waiting for them: a failed collective often leaves
                its peers waiting until their own timeout.

        Example::

            cluster.run_all(lambda node: node.torchrun_argv("step.py"), timeout=60,
                            env=lambda node: node.env(GLOO_SOCKET_IFNAME="ens1"))
        """
        deadline = time.monotonic() + timeout
        procs = self.popen_all(argv, env=env, cwd=cwd)
        try:
            running = list(procs)
            while running and time.monotonic() < deadline:
                running = [proc for proc in running if proc.poll() is None]
                if stop_on_failure and any(proc.poll() not in (None, 0) for proc in procs):
                    for proc in running:
                        proc.kill("peer-failed")
                    break
                time.sleep(0.02)
        except BaseException:  # KeyboardInterrupt included: nothing outlives the call
            for proc in procs:
                proc.kill()
            raise
        results = [proc.wait(deadline - time.monotonic()) for proc in procs]
        if check:
            for result in results:
                result.check_returncode()
        return results

    # -- internals

    def _require_started(self) -> None:
        if not self._started or self._closed:
            state = "closed" if self._closed else "not started"
            raise RuntimeError(f"simulated cluster {self.tag} is {state}")

    def _track(self, proc: SimProcess) -> None:
        self._processes.append(proc)

    def _forget(self, proc: SimProcess) -> None:
        if proc in self._processes:
            self._processes.remove(proc)

    def _build(self) -> None:
        ip, bridge = _tool("ip"), _tool("bridge")
        sw = self.switch
        peers = {node.hostname: node.cluster_addr for node in self.nodes}
        management_peers = {node.hostname: node.management_addr for node in self.nodes}
        for node in self.nodes:
            etc = _ETC_NETNS / node.netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(render_hosts(
                node.hosts, node.hostname, cluster_addr=node.cluster_addr,
                management_addr=node.management_addr, peers=peers,
                management_peers=management_peers))
            (etc / "resolv.conf").write_text("")  # no nameserver: lookups fail at once
            if Path("/etc/nsswitch.conf").exists():  # bind mounts need an existing target
                (etc / "nsswitch.conf").write_text(_NSSWITCH)
        _cmd([ip, "netns", "add", sw])
        for bridge_name in ("mgmt", "cluster"):
            _cmd([ip, "-n", sw, "link", "add", bridge_name, "type", "bridge"])
        _cmd([ip, "-n", sw, "addr", "add", f"{MANAGEMENT_GATEWAY}/16", "dev", "mgmt"])
        for node in self.nodes:
            ns, i = node.netns, node.rank
            _cmd([ip, "netns", "add", ns])
            _cmd([ip, "-n", ns, "link", "set", "lo", "up"])
            links = [(f"m{i}", MANAGEMENT_IFNAME), (f"c{i}", CLUSTER_IFNAME)]
            # Interface index order is getifaddrs order, which NCCL's default walks.
            for outside, inside in (reversed(links) if self.cluster_first else links):
                _cmd([ip, "-n", sw, "link", "add", outside, "type", "veth", "peer", "name",
                      inside, "netns", ns])
            if node.mtu is not None:
                _cmd([ip, "-n", sw, "link", "set", f"c{i}", "mtu", str(node.mtu)])
                _cmd([ip, "-n", ns, "link", "set", CLUSTER_IFNAME, "mtu", str(node.mtu)])
            _cmd([ip, "-n", sw, "link", "set", f"m{i}", "master", "mgmt", "up"])
            _cmd([bridge, "-n", sw, "link", "set", "dev", f"m{i}", "isolated", "on"])
            _cmd([ip, "-n", sw, "link", "set", f"c{i}", "master", "cluster", "up"])
            _cmd([ip, "-n", ns, "addr", "add", f"{node.management_addr}/16", "dev",
                  MANAGEMENT_IFNAME])
            _cmd([ip, "-n", ns, "addr", "add", f"{node.cluster_addr}/24", "dev", CLUSTER_IFNAME])
            _cmd([ip, "-n", ns, "link", "set", MANAGEMENT_IFNAME, "up"])
            _cmd([ip, "-n", ns, "link", "set", CLUSTER_IFNAME, "up"])
            _cmd([ip, "-n", ns, "route", "add", "default", "via", MANAGEMENT_GATEWAY, "dev",
                  MANAGEMENT_IFNAME])
        for bridge_name in ("mgmt", "cluster"):
            _cmd([ip, "-n", sw, "link", "set", bridge_name, "up"])
        self._wait_links_up(ip)

    def _wait_links_up(self, ip: str, timeout: float = 5.0) -> None:
        # operstate follows carrier asynchronously (linkwatch); detection reads it, so wait.
        deadline = time.monotonic() + timeout
        pending = [(n.netns, ifname) for n in self.nodes
                   for ifname in (MANAGEMENT_IFNAME, CLUSTER_IFNAME)]
        while pending:
            pending = [(ns, ifname) for ns, ifname in pending
                       if "state UP" not in _cmd([ip, "-n", ns, "-o", "link", "show", ifname])]
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"links not UP after {timeout:.0f} s: {pending}")
            if pending:
                time.sleep(0.02)


def _per_node(name: str, value: T | Sequence[T], nodes: int) -> list[T]:
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != nodes:
            raise ValueError(f"{name}: expected one value per node ({nodes}), got {len(value)}")
        return list(value)
    return [value] * nodes


def _for_each(name: str, value: object, nodes: Sequence[SimNode]) -> list[Any]:
    if callable(value):
        return [value(node) for node in nodes]
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == len(nodes):
        return list(value)
    raise TypeError(f"{name}: expected a callable node -> value or one value per node "
                    f"({len(nodes)})")


class ClusterFactory(Protocol):
    """The ``sim_cluster`` fixture: call it to get a started cluster torn down after the test."""

    def __call__(
        self,
        nodes: int = 2,
        *,
        trainers: int = 2,
        mtu: int | Sequence[int | None] | None = None,
        hosts: HostsStyle | Sequence[HostsStyle] = "debian",
        hostnames: Sequence[str] | None = None,
        primary_port: int = 29500,
        cluster_first: bool = False,
    ) -> SimCluster: ...


def make_cluster(
    nodes: int = 2,
    *,
    trainers: int = 2,
    mtu: int | Sequence[int | None] | None = None,
    hosts: HostsStyle | Sequence[HostsStyle] = "debian",
    hostnames: Sequence[str] | None = None,
    primary_port: int = 29500,
    cluster_first: bool = False,
) -> SimCluster:
    """Build and start a simulated cluster (close it, or use it as a context manager).

    Args:
        nodes: node count, e.g. ``2``.
        trainers: ``NUM_TRAINERS`` (processes per node), e.g. ``2``.
        mtu: ``ens1`` MTU for all nodes, or one per node (``(9000, 1500)`` for a mismatch).
        hosts: the :data:`HostsStyle` of every node, or one per node.
        hostnames: one per node; default ``node-0``, ``node-1``, ...
        primary_port: ``PRIMARY_PORT``/``MASTER_PORT``, e.g. ``29500``.
        cluster_first: create ``ens1`` before ``eth0``, so that it comes first in
            ``getifaddrs`` order (NCCL's default then bootstraps on it, as on some Runpod pods).
    """
    sweep_leftovers()
    return SimCluster(nodes, trainers=trainers, mtu=mtu, hosts=hosts, hostnames=hostnames,
                      primary_port=primary_port, cluster_first=cluster_first).start()


# -- teardown and the sweeper ----------------------------------------------------------------


def _netns_names() -> list[str]:
    out = _cmd([_tool("ip"), "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _remove_netns(*names: str) -> list[str]:
    """Kill what runs inside, delete the namespaces and their /etc/netns dirs; return problems."""
    ip = _tool("ip")
    existing = set(_netns_names())
    problems: list[str] = []
    for name in names:
        if name in existing:
            pids = subprocess.run([ip, "netns", "pids", name], capture_output=True, text=True,
                                  check=False).stdout.split()
            for pid in pids:  # only what our harness started inside our namespace
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            proc = subprocess.run([ip, "netns", "del", name], capture_output=True, text=True,
                                  check=False)
            # A concurrent sweep may have deleted it first: only a namespace still there counts.
            if proc.returncode != 0 and name in _netns_names():
                problems.append(f"ip netns del {name}: {proc.stderr.strip()}")
        shutil.rmtree(_ETC_NETNS / name, ignore_errors=True)
        if (_ETC_NETNS / name).exists():
            problems.append(f"could not remove {_ETC_NETNS / name}")
    return problems


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(names: Iterable[str]) -> list[str]:
    stale = []
    for name in names:
        match = _NETNS_NAME.match(name)
        if match and not _pid_alive(int(match["pid"])):
            stale.append(name)
    return stale


def sweep_leftovers() -> list[str]:
    """Remove namespaces and ``/etc/netns`` dirs of ours whose creating process is gone.

    A test run killed by SIGKILL or a power cut cannot tear down; the next run cleans up.
    Names of live processes (another test run right now) are left alone.

    Returns:
        The names removed, e.g. ``["ce-4242-a1b2c3-n0", "ce-4242-a1b2c3-sw"]``.
    """
    names = set(_netns_names())
    if _ETC_NETNS.is_dir():
        names.update(entry.name for entry in _ETC_NETNS.iterdir())
    stale = sorted(_stale(names))
    problems = _remove_netns(*stale)
    if problems:
        raise RuntimeError("could not remove leftover simulated nodes:\n" + "\n".join(problems))
    return stale


@atexit.register
def _close_open_clusters() -> None:
    for cluster in list(_OPEN_CLUSTERS):
        try:
            cluster.close()
        except RuntimeError as e:  # at exit there is no one left to raise to
            print(e, file=sys.stderr)
