"""Which links to measure, in which order, and which node is slow.

Each node's first rank sends to the first rank of the next node in rank order and back (a ring,
both directions; with two nodes, ``0 → 1`` and ``1 → 0``). Transfers run in rounds in which no
node takes part twice, so a measurement never shares a NIC with another one: two rounds per
direction for an even node count, three for an odd one, whatever the cluster size.

A node's *send* bandwidth is the best of its transfers out, its *receive* bandwidth the best of
its transfers in, and its link bandwidth the smaller of the two. Taking the best one on each side
is what pins a slow transfer on the right end: a node whose NIC is throttled is slow towards both
of its neighbours, while each neighbour still has one fast transfer with its other neighbour.
With two nodes the two ends cannot be told apart, and both are named.

A node is slow when its link bandwidth is below ``min_fraction`` × the median over all nodes.
The median includes the node itself. With three nodes "the median of the two others" is their
mean: beside a slow node, a healthy node caught at a busy moment at a quarter of its speed fell
below half of that mean and was named too. The median of all three is the middle node, which
one outlier cannot move; from five nodes on the two rules differ little. With two nodes there is
one pair: when one direction is below ``min_fraction`` × the other, both nodes are named, since
nothing tells which end is at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from clusterenv.bench.units import median

__all__ = ["NodeScore", "Transfer", "ring_transfers", "schedule_rounds", "score_nodes",
           "slow_transfers", "transfers_by_pair"]

#: A directed transfer between two nodes, by node rank: ``(sender, receiver)``.
Pair = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One measured point-to-point transfer between the first ranks of two nodes.

    Attributes:
        src: Sending node rank, e.g. ``2``.
        dst: Receiving node rank, e.g. ``0``.
        size: Bytes per transfer, e.g. ``4194304``.
        seconds: Median time of the timed iterations (from the sender's first byte to the
            receiver's acknowledgement), e.g. ``0.0021``.
        iterations: Timed iterations, e.g. ``5``.
    """

    src: int
    dst: int
    size: int
    seconds: float
    iterations: int

    @property
    def gbs(self) -> float:
        """Bandwidth in GB/s (10^9 bytes per second), e.g. ``2.0``."""
        return self.size / self.seconds / 1e9


@dataclass(frozen=True, slots=True)
class NodeScore:
    """One node's link bandwidth and how it compares with the others'.

    Attributes:
        node: Node rank, e.g. ``2``.
        send_gbs: Best transfer out of this node in GB/s; None when it sent nothing.
        recv_gbs: Best transfer into this node in GB/s; None when it received nothing.
        median_gbs: Median link bandwidth over all nodes (with two nodes: the faster direction);
            None on one node.
        slow: Below ``min_fraction`` × ``median_gbs``.
    """

    node: int
    send_gbs: float | None
    recv_gbs: float | None
    median_gbs: float | None
    slow: bool

    @property
    def gbs(self) -> float | None:
        """The node's link bandwidth: the smaller of :attr:`send_gbs` and :attr:`recv_gbs`."""
        known = [v for v in (self.send_gbs, self.recv_gbs) if v is not None]
        return min(known) if known else None


def ring_transfers(nodes: int) -> list[Pair]:
    """The directed transfers of a ring over ``nodes`` nodes, both directions, each once.

    Example: ``3`` → ``[(0, 1), (1, 2), (2, 0), (1, 0), (2, 1), (0, 2)]``; ``2`` →
    ``[(0, 1), (1, 0)]``; ``1`` → ``[]``.
    """
    if nodes < 2:
        return []
    forward = [(i, (i + 1) % nodes) for i in range(nodes)]
    backward = [(dst, src) for src, dst in forward]
    return list(dict.fromkeys(forward + backward))


def schedule_rounds(pairs: Sequence[Pair]) -> list[list[Pair]]:
    """Group transfers into rounds in which no node appears twice, keeping the given order.

    Deterministic, so every rank computes the same schedule. Example: the 4-node ring gives
    ``[[(0, 1), (2, 3)], [(1, 2), (3, 0)], [(1, 0), (3, 2)], [(2, 1), (0, 3)]]``.
    """
    rounds: list[list[Pair]] = []
    busy: list[set[int]] = []
    for src, dst in pairs:
        for members, used in zip(rounds, busy, strict=True):
            if src not in used and dst not in used:
                members.append((src, dst))
                used.update((src, dst))
                break
        else:
            rounds.append([(src, dst)])
            busy.append({src, dst})
    return rounds


def score_nodes(
    nodes: Iterable[int], transfers: Iterable[Transfer], *, min_fraction: float
) -> list[NodeScore]:
    """Each node's send, receive and link bandwidth and whether it is slow (see the module).

    Args:
        nodes: Node ranks, e.g. ``range(3)``.
        transfers: The measured transfers.
        min_fraction: e.g. ``0.5``: slow below half the median of the other nodes.

    Returns:
        One :class:`NodeScore` per node, in the given order.
    """
    ranks = list(nodes)
    sent: dict[int, list[float]] = {n: [] for n in ranks}
    received: dict[int, list[float]] = {n: [] for n in ranks}
    for transfer in transfers:
        sent.setdefault(transfer.src, []).append(transfer.gbs)
        received.setdefault(transfer.dst, []).append(transfer.gbs)
    best: dict[int, tuple[float | None, float | None]] = {
        n: (max(sent[n], default=None), max(received[n], default=None)) for n in ranks
    }
    link: dict[int, float | None] = {}
    for n, (send, recv) in best.items():
        known = [v for v in (send, recv) if v is not None]
        link[n] = min(known) if known else None
    known = [v for v in link.values() if v is not None]
    typical = median(known) if len(known) > 1 else None
    scores = []
    for n in ranks:
        mine = link[n]
        slow = mine is not None and typical is not None and mine < min_fraction * typical
        scores.append(NodeScore(n, best[n][0], best[n][1], typical, slow))
    if len(ranks) == 2:
        return _judge_pair(scores, min_fraction)
    return scores


def _judge_pair(scores: list[NodeScore], min_fraction: float) -> list[NodeScore]:
    # Every node's min(send, recv) is the slower direction, so the medians above cannot differ.
    first, second = scores
    directions = [v for v in (first.send_gbs, second.send_gbs) if v is not None]
    lopsided = len(directions) == 2 and min(directions) < min_fraction * max(directions)
    return [replace(s, slow=lopsided, median_gbs=max(directions, default=None))
            for s in scores]


def slow_transfers(
    transfers: Sequence[Transfer], slow_nodes: Iterable[int], *, min_fraction: float
) -> list[Transfer]:
    """Transfers below ``min_fraction`` × the median of the transfers between nodes that are not
    slow, not explained by a slow node at either end: a bad cable or switch port between two
    otherwise healthy nodes (or a moment of contention on one of them)."""
    named = set(slow_nodes)
    healthy = [t for t in transfers if t.src not in named and t.dst not in named]
    if len(healthy) < 3:
        return []
    typical = median(t.gbs for t in healthy)
    return [t for t in healthy
            if t.gbs < min_fraction * typical and t.src not in named and t.dst not in named]


def transfers_by_pair(transfers: Iterable[Transfer]) -> Mapping[Pair, Transfer]:
    """The transfers keyed by ``(src, dst)``."""
    return {(t.src, t.dst): t for t in transfers}
