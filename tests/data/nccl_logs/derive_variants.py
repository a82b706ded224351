"""Write the NCCL log variants in this directory from the real logs in ``real/``.

Each variant changes one thing in a real log (another interface, a socket fallback, a second
node, GPUDirect off, launcher prefixes) so that a test can check the parser and the findings
on what such a log really looks like. The files are checked in; rerun this after editing it::

    python tests/data/nccl_logs/derive_variants.py
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
REAL = HERE / "real"
ROCE = "nccl-info-h100-roce-2.27-ofi-plugin-fallback-ib.txt"
DOCKER = "nccl-info-docker-bridge-eth0-no-libibverbs-socket.txt"
HOST_A = "tpgds-aihub0008"


def real_lines(name: str) -> list[str]:
    """The log lines of a real capture, without its ``# source:`` line."""
    text = (REAL / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if not line.startswith("# source:")]


def prefix_of(line: str) -> str:
    """``host:pid:tid [dev] `` of a line."""
    return line.split(" NCCL ", 1)[0] + " "


def socket_fallback(lines: list[str]) -> list[str]:
    """The RoCE node with /dev/infiniband not passed into the container: NCCL uses sockets."""
    out = []
    for line in lines:
        if "NET/IB : Using" in line:
            head = prefix_of(line)
            out += [
                f"{head}misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
                f"{head}transport/net_ib/init.cc:291 NCCL WARN NET/IB : Unable to open device "
                "mlx5_0",
                f"{head}NCCL INFO NET/IB : No device found.",
                f"{head}NCCL INFO NET/Socket : Using [0]enp25s0np0:10.99.91.63<0>",
            ]
            continue
        out.append(
            line.replace("Initialized NET plugin IB", "Initialized NET plugin Socket")
            .replace("Assigned NET plugin IB to comm", "Assigned NET plugin Socket to comm")
            .replace("Using network IB", "Using network Socket")
        )
    return out


def eth0_management(lines: list[str]) -> list[str]:
    """The RoCE node with NCCL_SOCKET_IFNAME unset: NCCL picks the 172.x management eth0."""
    return [
        line.replace("enp25s0np0:10.99.91.63", "eth0:172.20.0.5")
        for line in lines
        if "NCCL_SOCKET_IFNAME set by environment" not in line
    ]


def ipv6_veth_timeout(lines: list[str]) -> list[str]:
    """The docker-bridge log on a host whose first interfaces are a tunnel and a veth with IPv6
    link-local addresses only (NCCL 2.5 picks them), followed by connection timeouts."""
    tunnel = (
        "[0]ip6tnl0:fe80::2c0:ffff:fe00:1%ip6tnl0<0> [1]veth0:fe80::a8c1:abff:fe12:3456%veth0<0>"
    )
    veth = "[0]veth0:fe80::a8c1:abff:fe12:3456%veth0<0>"
    out = [
        line.replace("Bootstrap : Using [0]eth0:172.17.0.2<0>", f"Bootstrap : Using {tunnel}")
        .replace("NET/Socket : Using [0]eth0:172.17.0.2<0>", f"NET/Socket : Using {veth}")
        for line in lines
    ]
    head = prefix_of(lines[0])
    out += [
        f"{head}include/socket.h:403 NCCL WARN Connect to fe80::a8c1:abff:fe12:9999%veth0<43429> "
        "failed : Connection timed out",
        f"{head}NCCL INFO bootstrap.cc:95 -> 2",
        f"{head}NCCL INFO init.cc:1110 -> 2",
    ]
    return out


def second_node(lines: list[str]) -> list[str]:
    """The socket-fallback node as rank 0-7 on another host (pids and address changed)."""
    out = []
    for original in socket_fallback(lines):
        line = original.replace(HOST_A, "tpgds-aihub0007").replace("10.99.91.63", "10.99.91.62")
        line = re.sub(r":2070(\d\d):2070\1 ", lambda m: f":1880{m[1]}:1880{m[1]} ", line)
        out.append(re.sub(r"\brank (\d+) nranks", lambda m: f"rank {int(m[1]) - 8} nranks", line))
    return out


def interleave(first: list[str], second: list[str]) -> list[str]:
    out = []
    for i in range(max(len(first), len(second))):
        out += first[i : i + 1] + second[i : i + 1]
    return out


def gdr_disabled(lines: list[str]) -> list[str]:
    """The RoCE node in a two-node job with nvidia_peermem missing and no DMA-BUF: GPUDirect off."""
    out = []
    for line in lines:
        if "DMA-BUF is available" in line:
            continue
        out.append(line)
        if "Using network IB" in line:
            head = prefix_of(line)
            dev = int(head.rsplit("[", 1)[1].split("]")[0])
            out += [
                f"{head}NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA {i} 'mlx5_{n}'"
                for i, n in enumerate((0, 1, 2, 5, 6, 7, 8, 11))
            ]
            out += [
                f"{head}NCCL INFO comm 0x55a223a946d0 rank {8 + dev} nRanks 16 nNodes 2 "
                f"localRanks 8 localRank {dev} MNNVL 0",
                f"{head}NCCL INFO Channel 00/0 : {dev}[{dev}] -> {8 + dev}[{dev}] [receive] "
                f"via NET/IB/{dev}",
                f"{head}NCCL INFO Channel 01/0 : {8 + dev}[{dev}] -> {dev}[{dev}] [send] "
                f"via NET/IB/{dev}",
            ]
    return out


_STYLES = (
    lambda rank, line: f"[rank{rank}]:{line}",
    lambda rank, line: f"{rank}: {line}",
    lambda rank, line: f"[1,{rank}]<stdout>:{line}",
    lambda rank, line: f"2025-03-01T12:00:{rank:02d}.123456Z {line}",
)


def launcher_prefixed(lines: list[str]) -> list[str]:
    """The RoCE log as launchers print it: per-rank prefixes of four launcher styles, training
    output in between, noise lines cut short, and two lines run together."""
    out = []
    for number, line in enumerate(lines):
        head = prefix_of(line)
        dev = int(head.rsplit("[", 1)[1].split("]")[0])
        text = _STYLES[dev % 4](8 + dev, line)
        if number % 7 == 3 and ("Failed to find" in line or "MNNVL" in line):
            text = text[: len(text) * 2 // 3]  # cut short
        out.append(text)
        if number % 25 == 0:
            out.append(f"[rank{8 + dev}]: step {number} loss 2.{number:03d} lr 3e-4")
    joined = next(i for i, line in enumerate(out) if "RAS client listening" in line)
    out[joined : joined + 2] = [out[joined] + out[joined + 1]]
    return out


EFA = "nccl-info-aws-p5en-h200-efa-ofi.txt"
# NCCL's completion-error WARN (src/transport/net_ib.cc, NCCL 2.19-2.22 format string
# "NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d (%s)")
_COMPLETION = ("transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
               "10.99.91.62<{port}> with error {status}, opcode {opcode}, len 0, vendor err "
               "{vendor} (Recv) localGid ::ffff:10.99.91.63 remoteGids ::ffff:10.99.91.62")


def _dev(head: str) -> int:
    return int(head.rsplit("[", 1)[1].split("]", maxsplit=1)[0])


def net_socket_channels(lines: list[str]) -> list[str]:
    """The RoCE node with NCCL_NET=Socket and no `Using network` line: NET/IB still lists its
    devices, but the channels go `via NET/Socket/0` (sockets never use GPUDirect RDMA)."""
    out = []
    for line in lines:
        if any(t in line for t in ("Using network", "Assigned NET plugin", "Initialized NET")):
            continue
        out.append(line)
        if "NCCL_IB_DISABLE set by environment" in line:
            out.append(prefix_of(line) + "NCCL INFO NCCL_NET set by environment to Socket")
        if "NET/IB : Using" in line:
            head = prefix_of(line)
            dev = _dev(head)
            out += [
                f"{head}NCCL INFO NET/Socket : Using [0]enp25s0np0:10.99.91.63<0>",
                f"{head}NCCL INFO Channel 00/0 : {dev}[{dev}] -> {8 + dev}[{dev}] [receive] "
                "via NET/Socket/0",
                f"{head}NCCL INFO Channel 00/0 : {8 + dev}[{dev}] -> {dev}[{dev}] [send] "
                "via NET/Socket/0",
            ]
    return out


def completion_error_12(lines: list[str]) -> list[str]:
    """The two-node RoCE job (GPUDirect off variant) where one rank's receives fail with
    ibverbs status 12 (transport retry counter exceeded), the others' with status 5 (flushed),
    then the proxy gives up and init returns ncclSystemError."""
    out = []
    for line in gdr_disabled(lines):
        out.append(line)
        if "[receive] via NET/IB/" in line:
            head = prefix_of(line)
            dev = _dev(head)
            status, vendor = (12, 129) if dev == 3 else (5, 244)
            out.append(head + _COMPLETION.format(port=51230 + dev, status=status, opcode=0,
                                                 vendor=vendor))
            out.append(f"{head}proxy.cc:1523 NCCL WARN [Proxy Service {dev}] Failed to execute "
                       f"operation Connect from rank {8 + dev}, retcode 3")
            out.append(f"{head}NCCL INFO init.cc:1110 -> 2")
    return out


def ib_gdr_completion_error_5(lines: list[str]) -> list[str]:
    """The node on InfiniBand ports (link layer `/IB` instead of `/RoCE`) with GPUDirect RDMA
    on, whose receives fail with status 5 and vendor err 249."""
    out = []
    for original in lines:
        if "DMA-BUF is available" in original:
            continue
        line = original.replace(":1/RoCE", ":1/IB")
        out.append(line)
        if "Using network IB" in line:
            head = prefix_of(line)
            dev = _dev(head)
            out += [
                f"{head}NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA {i} 'mlx5_{n}'"
                for i, n in enumerate((0, 1, 2, 5, 6, 7, 8, 11))
            ]
            out += [
                f"{head}NCCL INFO comm 0x55a223a946d0 rank {8 + dev} nRanks 16 nNodes 2 "
                f"localRanks 8 localRank {dev} MNNVL 0",
                f"{head}NCCL INFO Channel 00/0 : {dev}[{dev}] -> {8 + dev}[{dev}] [receive] "
                f"via NET/IB/{dev}/GDRDMA",
                head + _COMPLETION.format(port=51230 + dev, status=5, opcode=129, vendor=249),
            ]
    return out


def _cloudwatch(number: int, line: str) -> str:
    stamp = f"2025-03-01T12:{number // 60 % 60:02d}:{number % 60:02d}.{number % 1000:03d}-07:00"
    return f"  | {stamp}{line} | {line}"


def cloudwatch_export(lines: list[str]) -> list[str]:
    """The RoCE log as a CloudWatch export prints it: a timestamp column glued to the host name,
    and each message repeated in a second ` | ` column."""
    return [_cloudwatch(number, line) for number, line in enumerate(lines)]


_MORE_STYLES = (
    lambda number, dev, line: f"[{56 + dev}] {line}",
    lambda number, dev, line: f"{number + 1:6d}  {line}",
    lambda number, dev, line: f"Mar  1 12:00:{number % 60:02d} gpu-node-7 python[4242]: {line}",
    lambda number, dev, line: f"[pod/trainer-worker-1/pytorch] {line}",
    lambda number, dev, line: f"2025-03-01T12:00:{number % 60:02d}.123456789Z {line}",
    lambda number, dev, line: f"2025-03-01 12:00:{number % 60:02d} [1,{dev}]<stdout>:{line}",
    lambda number, dev, line: f'"2025-03-01 12:00:{number % 60:02d}","{line}"',
)


def more_decorations(lines: list[str]) -> list[str]:
    """The RoCE log with the prefixes of other tools: `[56] ` rank prefixes, line numbers,
    syslog, Kubernetes and `kubectl logs --timestamps`, a date before `[1,0]<stdout>:`, and a
    CSV export."""
    out = []
    for number, line in enumerate(lines):
        out.append(_MORE_STYLES[number % len(_MORE_STYLES)](number, _dev(prefix_of(line)), line))
    return out


def two_nodes_private_172(lines: list[str]) -> list[str]:
    """Two nodes on an ordinary 172.20.0.0/16 cluster network where bootstrap worked: the RoCE
    node and a copy of it as ranks 0-7 on another host, addresses moved to 172.20.91.x."""
    second = []
    for original in lines:
        line = original.replace(HOST_A, "tpgds-aihub0007").replace("10.99.91.63", "10.99.91.62")
        line = re.sub(r":2070(\d\d):2070\1 ", lambda m: f":1880{m[1]}:1880{m[1]} ", line)
        second.append(re.sub(r"\brank (\d+) nranks", lambda m: f"rank {int(m[1]) - 8} nranks",
                             line))
    return [line.replace("10.99.91.", "172.20.91.") for line in interleave(lines, second)]


def docker_ens1_listed(lines: list[str]) -> list[str]:
    """The docker-bridge log where NCCL also lists a cluster interface ens1 (Runpod style) that
    it did not bootstrap on."""
    return [line.replace("NET/Socket : Using [0]eth0:172.17.0.2<0>",
                         "NET/Socket : Using [0]eth0:172.17.0.2<0> [1]ens1:10.65.0.2<0>")
            for line in lines]


def socket_channel_veth(lines: list[str]) -> list[str]:
    """The docker-bridge log on a host network whose NET/Socket list is eno1 and a link-local
    veth, with channels `via NET/Socket/1` (the veth) and connections that time out."""
    veth = "veth3f2a1b:fe80::a8c1:abff:fe12:3456%veth3f2a1b<0>"
    out = []
    for original in lines:
        line = original.replace("Bootstrap : Using [0]eth0:172.17.0.2<0>",
                                "Bootstrap : Using [0]eno1:10.1.0.2<0>").replace(
            "NET/Socket : Using [0]eth0:172.17.0.2<0>",
            f"NET/Socket : Using [0]eno1:10.1.0.2<0> [1]{veth}")
        out.append(line)
        if "NET/Socket : Using" in line:
            head = prefix_of(line)
            out += [
                f"{head}NCCL INFO Channel 00 : 0[0] -> 1[0] [receive] via NET/Socket/1",
                f"{head}NCCL INFO Channel 00 : 1[0] -> 0[0] [send] via NET/Socket/1",
            ]
    head = prefix_of(lines[0])
    out += [
        f"{head}include/socket.h:403 NCCL WARN Connect to "
        "fe80::a8c1:abff:fe12:9999%veth3f2a1b<43429> failed : Connection timed out",
        f"{head}NCCL INFO init.cc:1110 -> 2",
    ]
    return out


def mixed_link_layer(lines: list[str]) -> list[str]:
    """The node with InfiniBand ports and one RoCE port in its list (`[2]mlx5_2:1/RoCE` among
    `/IB`), a ring through it (`via NET/IB/2`) and a completion error."""
    out = []
    for original in lines:
        line = original
        if "NET/IB : Using" in line or "NET/IB: [" in line:
            line = (line.replace(":1/RoCE", ":1/IB").replace("mlx5_2:1/IB", "mlx5_2:1/RoCE")
                    .replace("mlx5_2:uverbs2:1/IB", "mlx5_2:uverbs2:1/RoCE"))
        out.append(line)
        if "Using network IB" in line:
            head = prefix_of(line)
            dev = _dev(head)
            out.append(f"{head}NCCL INFO Channel 02/0 : {dev}[{dev}] -> {8 + dev}[{dev}] "
                       "[receive] via NET/IB/2")
            if dev == 1:
                out.append(head + _COMPLETION.format(port=51231, status=12, opcode=0,
                                                     vendor=129))
    return out


def retry_cnt_15(lines: list[str]) -> list[str]:
    """The RoCE node launched with NCCL_IB_RETRY_CNT=15 (verbs takes 0-7)."""
    out = []
    for line in lines:
        out.append(line)
        if "NCCL_IB_DISABLE set by environment to 0." in line:
            out.append(line.replace("NCCL_IB_DISABLE set by environment to 0.",
                                    "NCCL_IB_RETRY_CNT set by environment to 15."))
    return out


def efa_no_device(lines: list[str]) -> list[str]:
    """The EFA job in a container that was given no EFA device: libfabric's fi_getinfo finds no
    efa provider, aws-ofi-nccl selects none and fails, and init returns an error."""
    out = []
    for line in lines:
        if "NET/OFI" in line or "Using network" in line:
            continue
        head = prefix_of(line)
        pid = head.split(":")[1]
        out += [
            f"libfabric:{pid}:1709294400::core:core:fi_getinfo_():1386<info> fi_getinfo: "
            "provider efa output empty list",
            line,
            f"{head}nccl_ofi_net.c:1205 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data "
            "available",
            f"{head}NCCL INFO init.cc:1110 -> 2",
        ]
    return out


VARIANTS = {
    "roce-2.27-socket-fallback.txt": (ROCE, socket_fallback),
    "roce-2.27-eth0-management.txt": (ROCE, eth0_management),
    "docker-bridge-ipv6-veth-timeout.txt": (DOCKER, ipv6_veth_timeout),
    "roce-2.27-two-nodes-mixed.txt": (ROCE, lambda lines: interleave(lines, second_node(lines))),
    "roce-2.27-gdr-disabled.txt": (ROCE, gdr_disabled),
    "roce-2.27-launcher-prefixed.txt": (ROCE, launcher_prefixed),
    "roce-2.27-net-socket-channels.txt": (ROCE, net_socket_channels),
    "roce-2.27-completion-error-12.txt": (ROCE, completion_error_12),
    "ib-2.27-gdr-completion-error-5.txt": (ROCE, ib_gdr_completion_error_5),
    "roce-2.27-cloudwatch-export.txt": (ROCE, cloudwatch_export),
    "roce-2.27-more-decorations.txt": (ROCE, more_decorations),
    "roce-2.27-two-nodes-172-network.txt": (ROCE, two_nodes_private_172),
    "docker-bridge-eth0-ens1-listed.txt": (DOCKER, docker_ens1_listed),
    "docker-socket-channel-veth.txt": (DOCKER, socket_channel_veth),
    "roce-2.27-mixed-link-layer.txt": (ROCE, mixed_link_layer),
    "roce-2.27-retry-cnt-15.txt": (ROCE, retry_cnt_15),
    "efa-p5en-no-efa-device.txt": (EFA, efa_no_device),
}


def main() -> None:
    for name, (source, derive) in VARIANTS.items():
        doc = " ".join((derive.__doc__ or "interleaved with the socket-fallback node").split())
        header = f"# derived from real/{source} by derive_variants.py: {doc}"
        text = "\n".join([header, *derive(real_lines(source))]) + "\n"
        (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
