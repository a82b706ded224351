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


VARIANTS = {
    "roce-2.27-socket-fallback.txt": (ROCE, socket_fallback),
    "roce-2.27-eth0-management.txt": (ROCE, eth0_management),
    "docker-bridge-ipv6-veth-timeout.txt": (DOCKER, ipv6_veth_timeout),
    "roce-2.27-two-nodes-mixed.txt": (ROCE, lambda lines: interleave(lines, second_node(lines))),
    "roce-2.27-gdr-disabled.txt": (ROCE, gdr_disabled),
    "roce-2.27-launcher-prefixed.txt": (ROCE, launcher_prefixed),
}


def main() -> None:
    for name, (source, derive) in VARIANTS.items():
        doc = " ".join((derive.__doc__ or "interleaved with the socket-fallback node").split())
        header = f"# derived from real/{source} by derive_variants.py: {doc}"
        text = "\n".join([header, *derive(real_lines(source))]) + "\n"
        (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
